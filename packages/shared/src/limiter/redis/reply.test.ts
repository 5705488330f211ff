import fc from 'fast-check';
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

  it('reads any reply exactly as splitting it at each space and reading each value as a number would', () => {
    // the reference: the reply split at single spaces, each value read by Number ('' is no number)
    const readNumber = (text: string) => (text === '' ? Number.NaN : Number(text));
    const reference = (reply: string, n: number) => {
      const values = reply.split(' ');
      if (values.length !== 4 * n + 1) return undefined;
      const limits = [];
      for (let i = 0; i < n; i++) {
        const [allowed, level, retryAfterMs, resetMs] = values.slice(4 * i, 4 * i + 4).map(String);
        const numbers = [readNumber(level!), readNumber(retryAfterMs!), readNumber(resetMs!)];
        if (!(allowed === '1' || allowed === '0')) return undefined;
        if (!Number.isFinite(numbers[0]) || !Number.isInteger(numbers[1]) || !Number.isInteger(numbers[2]))
          return undefined;
        limits.push([allowed === '1', ...numbers]);
      }
      const atMs = readNumber(values[4 * n]!);
      return Number.isFinite(atMs) ? { limits, atMs } : undefined;
    };
    const read = (reply: string, n: number) => {
      try {
        const decision = decisionOfReply(reply, checks.slice(0, n));
        return {
          limits: decision.limits.map(({ allowed, level, retryAfterMs, resetMs }) => [
            allowed,
            level,
            retryAfterMs,
            resetMs,
          ]),
          atMs: decision.atMs,
        };
      } catch (error) {
        if (error instanceof StoreError && error.code === 'STORE_ERROR') return undefined;
        throw error;
      }
    };
    // values as the script writes them (whole numbers of up to 17 digits and more, decimals, -0, -1),
    // and anything made of the characters they use
    const number = fc.oneof(
      fc.integer({ min: 0, max: 2 ** 31 }).map(String),
      fc.double({ noNaN: true }).map(String),
      fc.bigInt({ min: 0n, max: 10n ** 20n }).map(String),
      // 17 digits read one by one would round twice: 44738313488960092 is not what Number reads
      fc.constantFrom('-0', '-1', '0', '1e3', '0x10', '+1', '', ' ', '9007199254740993', '44738313488960092'),
    );
    const wellFormed = fc.integer({ min: 1, max: 2 }).chain((n) =>
      fc.tuple(
        fc.constant(n),
        fc.array(fc.tuple(fc.constantFrom('1', '0'), number, number, number), {
          minLength: n,
          maxLength: n,
        }),
        number,
      ),
    );
    fc.assert(
      fc.property(wellFormed, ([n, limits, clock]) => {
        const reply = [...limits.flat(), clock].join(' ');
        expect(read(reply, n)).toEqual(reference(reply, n));
      }),
      { numRuns: 3_000 },
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 }), fc.stringMatching(/^[0-9 .e+-]{0,40}$/), (n, reply) => {
        expect(read(reply, n)).toEqual(reference(reply, n));
      }),
      { numRuns: 3_000 },
    );
  });

  it('reads any settlement reply exactly as splitting it at each space would', () => {
    const readNumber = (text: string) => (text === '' ? Number.NaN : Number(text));
    const reference = (reply: string, n: number) => {
      const values = reply === '' ? [] : reply.split(' ');
      if (values.length !== 2 * n) return undefined;
      const read = [];
      for (let i = 0; i < n; i++) {
        const level = readNumber(values[2 * i]!);
        const resetMs = readNumber(values[2 * i + 1]!);
        if (!Number.isFinite(level) || !Number.isInteger(resetMs)) return undefined;
        read.push(resetMs === -1 ? 'dropped' : [level, resetMs]);
      }
      return read;
    };
    const read = (reply: string, n: number) => {
      try {
        return settledOfReply(reply, settlements.slice(0, n)).map((s) =>
          s === DROPPED_SETTLEMENT ? 'dropped' : [s.level, s.resetMs],
        );
      } catch (error) {
        if (error instanceof StoreError && error.code === 'STORE_ERROR') return undefined;
        throw error;
      }
    };
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 }), fc.stringMatching(/^[0-9 .e+-]{0,24}$/), (n, reply) => {
        expect(read(reply, n)).toEqual(reference(reply, n));
      }),
      { numRuns: 5_000 },
    );
  });
});
