import { describe, expect, it } from 'vitest';
import { refusedBodyValue } from './json-body.js';

describe('refusedBodyValue', () => {
  it('accepts ordinary bodies', () => {
    expect(refusedBodyValue({ a: ['x', 1, null, { b: 'ü \u{1f600}' }], prototype: 'fine' })).toBeUndefined();
    expect(refusedBodyValue(undefined)).toBeUndefined();
  });

  it('names the first refused value in document order', () => {
    expect(refusedBodyValue({ a: 'ok', b: ['ok', { c: 'x\u0000' }], d: '\u0000' })).toBe(
      'body/b/1/c must not contain the NUL character (U+0000)',
    );
    expect(refusedBodyValue('\udc00x')).toMatch(/^body must not contain a lone surrogate/);
  });

  it('walks a deeply nested body without overflowing the stack', () => {
    let deep: unknown = 'bottom\u0000';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(refusedBodyValue(deep)).toMatch(/^body(\/0){100000} must not contain the NUL/);
    expect(refusedBodyValue(JSON.parse(`${'['.repeat(50_000)}${']'.repeat(50_000)}`))).toBeUndefined();
  });
});
