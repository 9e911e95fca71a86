// Which characters a string may hold once it leaves the agent: on the bus (dbus-next refuses NUL,
// sd-bus and GLib refuse noncharacters with "Bad message"), in libvirt's C strings and in XML.

/** U+FDD0..U+FDEF and the last two code points of every plane (U+FFFE, U+1FFFF, ... U+10FFFF). */
const NONCHARACTER = new RegExp(
  `[\\u{FDD0}-\\u{FDEF}${Array.from({ length: 17 }, (_, plane) => {
    const base = (plane * 0x10000 + 0xfffe).toString(16);
    const last = (plane * 0x10000 + 0xffff).toString(16);
    return `\\u{${base}}\\u{${last}}`;
  }).join('')}]`,
  'u',
);
/** In unicode mode a surrogate range matches only surrogates that are not part of a pair. */
const LONE_SURROGATE = /[\u{D800}-\u{DFFF}]/u;
/** Any code unit that can start a problem: a quick test that nearly every string passes at once. */
const SUSPECT = /[\u0000\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]/;
/** C0 controls, DEL and C1 controls. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** The same, except tab and newline, which multi-line free text needs. */
const CONTROL_EXCEPT_TAB_NEWLINE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

/**
 * Why a string cannot be carried by every D-Bus client, or undefined if it can: no NUL, valid
 * UTF-8 (a lone surrogate has no UTF-8 form) and no noncharacters.
 */
export function wireTextProblem(s: string): string | undefined {
  if (!SUSPECT.test(s)) return undefined;
  if (s.includes('\u0000')) return 'must not contain NUL';
  if (LONE_SURROGATE.test(s)) return 'must be valid UTF-8 (no lone surrogates)';
  if (NONCHARACTER.test(s)) return 'must not contain Unicode noncharacters (U+FDD0-U+FDEF, U+xFFFE, U+xFFFF)';
  return undefined;
}

/** wireTextProblem plus control characters; `allowTabNewline` for free text such as annotation values. */
export function textProblem(s: string, allowTabNewline = false): string | undefined {
  const control = allowTabNewline ? CONTROL_EXCEPT_TAB_NEWLINE : CONTROL;
  if (control.test(s)) return allowTabNewline ? 'must not contain control characters other than tab and newline' : 'must not contain control characters';
  return wireTextProblem(s);
}
