import { describe, expect, it } from 'vitest';
import { DROPPED_SETTLEMENT, type LimitCheck, type LimitSpec, type Settlement } from '../limits.js';
import { StoreError } from '../store.js';
import { decisionOfReply, settledOfReply } from './reply.js';

const bucket: LimitSpec = { algorithm: 'token-bucket', capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 0 };
const window: LimitSpec = { algorithm: 'sliding-window', max: 5, windowMs: 60_000 };
const checks: LimitCheck[] = [
  { key: 'a', spec: bucket, cost: 1 },
  { key: 'b', spec: window, cost: 1 },
];
const settlements: Settlement[] = [
  { key: 'a', spec: bucket, delta: -1, admittedAtMs: 1 },
  { key: 'b', spec: window, delta: 2, admittedAtMs: 1 },
];

function storeErrorOf(run: () => unknown): StoreError {
  try {
    run();
  } catch (error) {
    if (error instanceof StoreError) return error;
    throw error;
  }
  throw new Error('no error');
}

describe("the script's replies read back", () => {
  it('an acquire: per check allowed, level, retry-after and reset, then the clock', () => {
    const decision = decisionOfReply('1 9 0 1000 0 4.5 12000 60000 1795765851004.8279', checks);
    expect(decision.allowed).toBe(false);
    expect(decision.atMs).toBe(1795765851004.8279);
    expect(decision.retryAfterMs).toBe(12_000);
    expect(
      decision.limits.map(({ allowed, level, retryAfterMs, resetMs }) => [
        allowed,
        level,
        retryAfterMs,
        resetMs,
      ]),
    ).toEqual([
      [true, 9, 0, 1000],
      [false, 4.5, 12_000, 60_000],
    ]);
    expect(decision.limits.map((l) => l.remaining)).toEqual([9, 0]);
  });

  it('a settlement: per settlement level and reset; "0 -1" is a settlement dropped by an edit', () => {
    expect(settledOfReply('10 0 0 -1', settlements)).toEqual([
      expect.objectContaining({ level: 10, resetMs: 0 }),
      DROPPED_SETTLEMENT,
    ]);
    expect(settledOfReply('', [])).toEqual([]);
  });

  it('a reply of any other shape is a STORE_ERROR, never a guessed decision', () => {
    const acquireReplies: unknown[] = [
      '1 9 0 1000 1795765851004.8279', // one check's values for two checks
      '1 9 0 1000 1 4 0 1000 1795765851004.8279 7', // one value too many
      '2 9 0 1000 1 4 0 1000 1', // allowed is 1 or 0
      '1 nine 0 1000 1 4 0 1000 1', // a level that is no number
      '1 9 0.5 1000 1 4 0 1000 1', // waits are whole ms
      '1  0 1000 1 4 0 1000 1', // an empty value (Number('') would be 0)
      '1 9 0 1000 1 4 0 1000 ', // no clock
      [1, '9', 0, 1000, 1, '4', 0, 1000, '1'], // an array (the format before one string)
      null,
    ];
    for (const reply of acquireReplies) {
      expect(storeErrorOf(() => decisionOfReply(reply, checks)).code, JSON.stringify(reply)).toBe(
        'STORE_ERROR',
      );
    }
    for (const reply of ['10 0', '10 0 4 x', '10 0 4 0.5', '', ['10', 0, '4', 0]]) {
      expect(storeErrorOf(() => settledOfReply(reply, settlements)).code, JSON.stringify(reply)).toBe(
        'STORE_ERROR',
      );
    }
  });
});
