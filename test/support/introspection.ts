// A small reader for introspection XML (ours and dbus-next's), normalised for comparison.

export interface InterfaceShape {
  methods: Record<string, string[]>;
  signals: Record<string, string[]>;
  properties: Record<string, string>;
}

const attrs = (text: string): Record<string, string> =>
  Object.fromEntries([...text.matchAll(/([\w:]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));

function members(body: string, tag: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  const re = new RegExp(`<${tag}\\s+([^>]*?)(/>|>([\\s\\S]*?)</${tag}>)`, 'g');
  for (const m of body.matchAll(re)) {
    const args = [...(m[3] ?? '').matchAll(/<arg\s+([^>]*?)\/?>/g)].map((a) => {
      const { name = '', type = '', direction = '' } = attrs(a[1]!);
      return `${name}:${type}:${tag === 'signal' ? 'out' : direction || 'in'}`;
    });
    out[attrs(m[1]!).name!] = args;
  }
  return out;
}

export function parseIntrospection(xml: string): Record<string, InterfaceShape> {
  const clean = xml.replace(/<!--[\s\S]*?-->/g, '');
  const out: Record<string, InterfaceShape> = {};
  for (const m of clean.matchAll(/<interface\s+name="([^"]+)"\s*>([\s\S]*?)<\/interface>/g)) {
    const body = m[2]!;
    const properties: Record<string, string> = {};
    for (const p of body.matchAll(/<property\s+([^>]*?)\/?>/g)) {
      const a = attrs(p[1]!);
      properties[a.name!] = `${a.type}:${a.access}`;
    }
    out[m[1]!] = { methods: members(body, 'method'), signals: members(body, 'signal'), properties };
  }
  return out;
}

/** interface -> property -> its EmitsChangedSignal annotation ('' when it has none). */
export function emitsChangedAnnotations(xml: string): Record<string, Record<string, string>> {
  const clean = xml.replace(/<!--[\s\S]*?-->/g, '');
  const out: Record<string, Record<string, string>> = {};
  for (const m of clean.matchAll(/<interface\s+name="([^"]+)"\s*>([\s\S]*?)<\/interface>/g)) {
    const props: Record<string, string> = {};
    for (const p of m[2]!.matchAll(/<property\s+([^>]*?)(\/>|>([\s\S]*?)<\/property>)/g)) {
      const annotation = /<annotation\s+name="org\.freedesktop\.DBus\.Property\.EmitsChangedSignal"\s+value="([^"]*)"/.exec(p[3] ?? '');
      props[attrs(p[1]!).name!] = annotation?.[1] ?? '';
    }
    out[m[1]!] = props;
  }
  return out;
}
