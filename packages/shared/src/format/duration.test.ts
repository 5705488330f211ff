import { describe, expect, it } from 'vitest';
import { DurationError, MAX_DURATION_MS, parseDuration } from './duration.js';

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['1s', 1_000],
    ['1.5m', 90_000],
    ['1m', 60_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['0.5s', 500],
    ['01s', 1_000],
    ['365d', MAX_DURATION_MS],
    ['8760h', MAX_DURATION_MS],
    [250, 250],
    [1, 1],
    [MAX_DURATION_MS, MAX_DURATION_MS],
  ] as const)('%j is %d ms', (input, ms) => {
    expect(parseDuration(input)).toBe(ms);
  });

  it.each([
    '',
    '0s',
    '0ms',
    '0.0s',
    '1x',
    '1',
    's',
    '-1s',
    '+1s',
    ' 1s',
    '1s ',
    '1 s',
    '1S',
    '1sec',
    '1e3ms',
    '.5s',
    '1.s',
    '1.0000001s',
    '1m30s',
    '366d',
    '1000000000ms',
    0,
    -1,
    1.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    MAX_DURATION_MS + 1,
  ])('rejects %j with code DURATION_INVALID', (input) => {
    let caught: unknown;
    try {
      parseDuration(input);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(DurationError);
    expect(caught).toMatchObject({ code: 'DURATION_INVALID' });
    expect((caught as Error).message).not.toBe('');
  });
});
