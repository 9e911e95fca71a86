// Where a JSON text first goes wrong, as a byte offset. V8's JSON.parse messages quote the text
// around the fault, and a record file may be a copy of anything: the store logs this number instead.

class Stop extends Error {}

const NUMBER = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
const HEX4 = /[0-9a-fA-F]{4}/y;

/** The byte offset of the first character that makes text invalid JSON, or undefined if it is valid. */
export function jsonErrorOffset(text: string): number | undefined {
  let i = 0;
  const fail = (): never => {
    throw new Stop();
  };
  const skipSpace = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const literal = (word: string) => {
    for (const c of word) if (text[i++] !== c) (i--, fail());
  };
  const sticky = (re: RegExp) => {
    re.lastIndex = i;
    if (!re.test(text)) fail();
    i = re.lastIndex;
  };
  const string = () => {
    i++; // the opening quote
    for (;;) {
      if (i >= text.length || text.charCodeAt(i) < 0x20) fail();
      const c = text[i++];
      if (c === '"') return;
      if (c !== '\\') continue;
      if ('"\\/bfnrt'.includes(text[i] ?? 'x')) i++;
      else if (text[i] === 'u') (i++, sticky(HEX4));
      else fail();
    }
  };
  const member = () => {
    skipSpace();
    if (text[i] !== '"') fail();
    string();
    skipSpace();
    if (text[i] !== ':') fail();
    i++;
  };
  const closer = (open: string) => (open === '{' ? '}' : ']');
  // Iterative, so a deeply nested file cannot overflow the stack: `open` holds the open brackets.
  const open: string[] = [];
  try {
    for (let needValue = true; ; ) {
      skipSpace();
      if (needValue) {
        const c = text[i];
        needValue = false;
        if (c === '{' || c === '[') {
          i++;
          skipSpace();
          if (text[i] === closer(c)) i++;
          else {
            open.push(c);
            if (c === '{') member();
            needValue = true;
          }
        } else if (c === '"') string();
        else if (c === 't') literal('true');
        else if (c === 'f') literal('false');
        else if (c === 'n') literal('null');
        else sticky(NUMBER);
        continue;
      }
      const inner = open[open.length - 1];
      if (inner === undefined) break;
      if (text[i] === ',') {
        i++;
        if (inner === '{') member();
        needValue = true;
      } else if (text[i] === closer(inner)) {
        i++;
        open.pop();
      } else fail();
    }
    if (i < text.length) fail();
    return undefined;
  } catch (err) {
    if (!(err instanceof Stop)) throw err;
    return Buffer.byteLength(text.slice(0, Math.min(i, text.length)), 'utf8');
  }
}
