import { expect, it } from 'vitest';
import { jsonErrorOffset } from '../../../src/store/json-error-offset.js';

it.each([
  { text: '{"a":[1,{"b":null}],"c":"\\u00e9\\n"}', offset: undefined },
  { text: ' [true, false, -1.5e3] ', offset: undefined },
  { text: 'root:x:0:0', offset: 0 },
  { text: '', offset: 0 },
  { text: '{"a":1,}', offset: 7 },
  { text: '{"a" 1}', offset: 5 },
  { text: '[1 2]', offset: 3 },
  { text: '{"a":tru}', offset: 8 },
  { text: '{"a":1} x', offset: 8 },
  { text: '"\\q"', offset: 2 },
  { text: '{"é":1,}', offset: 8 }, // bytes, not characters: é is two
  { text: '['.repeat(100_000), offset: 100_000 }, // deep nesting does not overflow the stack
])('jsonErrorOffset($text) = $offset', ({ text, offset }) => {
  expect(jsonErrorOffset(text)).toBe(offset);
  // It agrees with JSON.parse on whether the text is valid.
  let valid = true;
  try {
    JSON.parse(text);
  } catch {
    valid = false;
  }
  expect(valid).toBe(offset === undefined);
});
