import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { wholeSecondsUp } from '../../headers.js';
import { type Scenario, scenarioArb } from '../../test-arbitraries.js';
import { LimitArgumentError, type Verdict } from '../algorithm.js';
import { MAX_WAIT_MS } from '../wait.js';
import {
  type BucketLimits,
  type BucketState,
  balanceAt,
  canEverAdmit,
  capacityRefillMs,
  evaluateBucket,
  refillRatePerMs,
  tokenBucketModel,
} from './model.js';

const RUNS = 3_000;

/** capacity 10, refill 1 per second: the documented debt example */
const spec = (maxDebt: number): BucketLimits => ({ capacity: 10, refill: 1, periodMs: 1_000, maxDebt });

/** One request against one bucket alone: evaluate, then charge if admitted (else hold). */
function decide(state: BucketState | undefined, limits: BucketLimits, cost: number, nowMs: number) {
  tokenBucketModel.assertArguments({ algorithm: 'token-bucket', ...limits }, cost);
  const evaluation = evaluateBucket(state, limits, cost, nowMs);
  if (!evaluation.allowed) return { decision: evaluation.hold(), state, changed: false };
  const charged = evaluation.charge();
  return { decision: charged.verdict, state: charged.state, changed: true, ttlMs: charged.ttlMs };
}

/** Runs requests through `decide`, keeping state the way a store does (absent = full). */
class Bucket {
  state: BucketState | undefined;
  constructor(readonly limits: BucketLimits) {}
  take(cost: number, nowMs: number): Verdict {
    const outcome = decide(this.state, this.limits, cost, nowMs);
    if (outcome.changed) this.state = outcome.decision.resetMs === 0 ? undefined : outcome.state;
    return outcome.decision;
  }
}

describe('the documented examples (docs/limits.md)', () => {
  it('capacity 10, refill 1/s, cost 8, maxDebt 10: admitted (2), admitted (−6), denied with Retry-After 7', () => {
    const bucket = new Bucket(spec(10));
    expect(bucket.take(8, 0)).toMatchObject({ allowed: true, level: 2, retryAfterMs: 0, resetMs: 8_000 });
    expect(bucket.take(8, 0)).toMatchObject({
      allowed: true,
      level: -6,
      retryAfterMs: 0,
      resetMs: 16_000,
    });
    const denied = bucket.take(8, 0);
    expect(denied).toEqual({ allowed: false, level: -6, retryAfterMs: 7_000, resetMs: 16_000 });
    expect(wholeSecondsUp(denied.retryAfterMs)).toBe(7);
    // b must be back to 1: one ms early is still denied, on time is admitted
    expect(bucket.take(8, 6_999).allowed).toBe(false);
    expect(bucket.take(8, 7_000)).toMatchObject({ allowed: true, level: -7 });
  });

  it('maxDebt 0 makes it classic: only one request of cost 8 is admitted', () => {
    const bucket = new Bucket(spec(0));
    expect(bucket.take(8, 0)).toMatchObject({ allowed: true, level: 2 });
    expect(bucket.take(8, 0)).toEqual({ allowed: false, level: 2, retryAfterMs: 6_000, resetMs: 8_000 });
    expect(bucket.take(8, 0).allowed).toBe(false);
  });

  it('a burst of unit-cost requests admits exactly capacity, whatever maxDebt', () => {
    for (const maxDebt of [0, 10, 1_000]) {
      const bucket = new Bucket(spec(maxDebt));
      const admitted = Array.from({ length: 50 }, () => bucket.take(1, 0)).filter((d) => d.allowed);
      expect(admitted).toHaveLength(10);
      expect(bucket.take(1, 0)).toMatchObject({ allowed: false, level: 0, retryAfterMs: 1_000 });
    }
  });

  it('a request costing less than one token behaves classically (admitted iff b ≥ c)', () => {
    const bucket = new Bucket({ capacity: 1, refill: 1, periodMs: 1_000, maxDebt: 100 });
    expect(bucket.take(0.75, 0)).toMatchObject({ allowed: true, level: 0.25 });
    expect(bucket.take(0.5, 0)).toMatchObject({ allowed: false, level: 0.25, retryAfterMs: 250 });
    expect(bucket.take(0.25, 0)).toMatchObject({ allowed: true, level: 0 });
  });

  it('a whole period refills exactly `refill` tokens: capacity 1, 1 per hour, just emptied, is full in 3,600,000 ms', () => {
    // elapsed · (refill / period) gave 3_600_000 · (1 / 3_600_000) = 0.9999999999999999: full 1 ms
    // late, so the gateway said t=3601 where the bucket is full after exactly an hour
    for (const nowMs of [0, 1_700_000_000_123.456]) {
      const limits = { capacity: 1, refill: 1, periodMs: 3_600_000, maxDebt: 1 };
      const first = decide(undefined, limits, 1, nowMs);
      expect(first.decision).toEqual({ allowed: true, level: 0, retryAfterMs: 0, resetMs: 3_600_000 });
      expect(wholeSecondsUp(first.decision.resetMs)).toBe(3_600);
      expect(capacityRefillMs(limits)).toBe(3_600_000);
      expect(decide(first.state, limits, 1, nowMs).decision).toMatchObject({
        allowed: false,
        retryAfterMs: 3_600_000,
      });
      expect(decide(first.state, limits, 1, nowMs + 3_600_000).decision.allowed).toBe(true);
    }
  });

  it('refills continuously with time, up to capacity', () => {
    const bucket = new Bucket(spec(0));
    for (let i = 0; i < 10; i++) bucket.take(1, 0);
    expect(bucket.take(1, 0).allowed).toBe(false);
    // 2.5 s later: 2.5 tokens, so two unit requests and then a denial 500 ms from the next token
    expect(bucket.take(1, 2_500)).toMatchObject({ allowed: true, level: 1.5 });
    expect(bucket.take(1, 2_500)).toMatchObject({ allowed: true, level: 0.5 });
    expect(bucket.take(1, 2_500)).toMatchObject({ allowed: false, retryAfterMs: 500, resetMs: 9_500 });
    // an hour later the bucket is full, not fuller
    expect(bucket.take(1, 3_600_000)).toMatchObject({ allowed: true, level: 9 });
  });

  it('a bucket left alone until full needs no state: a new bucket is a full bucket', () => {
    const bucket = new Bucket(spec(0));
    const first = bucket.take(4, 0);
    expect(first.resetMs).toBe(4_000);
    expect(balanceAt(bucket.state!, bucket.limits, first.resetMs)).toBe(10);
    expect(balanceAt(bucket.state!, bucket.limits, first.resetMs - 1)).toBeLessThan(10);
    expect(decide(undefined, spec(0), 4, 4_000).decision).toEqual(bucket.take(4, 4_000));
  });
});

describe('edges', () => {
  it('a request that can never be admitted is told to retry when the bucket is full', () => {
    const limits = spec(10);
    expect(canEverAdmit(limits, 20)).toBe(true);
    expect(canEverAdmit(limits, 20.5)).toBe(false);
    expect(canEverAdmit({ ...limits, capacity: 0.5 }, 1)).toBe(false);
    const bucket = new Bucket(limits);
    expect(bucket.take(30, 0)).toEqual({ allowed: false, level: 10, retryAfterMs: 0, resetMs: 0 });
    bucket.take(5, 0);
    expect(bucket.take(30, 0)).toEqual({ allowed: false, level: 5, retryAfterMs: 5_000, resetMs: 5_000 });
    // capacity below one token: a unit request never fits
    expect(new Bucket({ ...limits, capacity: 0.5 }).take(1, 0)).toMatchObject({
      allowed: false,
      retryAfterMs: 0,
    });
  });

  it('a clock going backwards refills nothing, and the same span is not credited twice', () => {
    const bucket = new Bucket(spec(0));
    expect(bucket.take(10, 5_000)).toMatchObject({ allowed: true, level: 0 });
    // 3 s in the past: no refill, and the wait counts from the bucket's own (later) time
    expect(bucket.take(1, 2_000)).toEqual({
      allowed: false,
      level: 0,
      retryAfterMs: 4_000,
      resetMs: 13_000,
    });
    expect(bucket.take(1, 5_000).allowed).toBe(false);
    expect(bucket.take(1, 6_000)).toMatchObject({ allowed: true, level: 0 });
    expect(bucket.state).toEqual({ balance: 0, updatedAtMs: 6_000, tag: 'T10/1/1000' });
    // admitted while the clock is behind: the bucket keeps its later timestamp
    bucket.take(0.0001, 7_000);
    const before = bucket.state!;
    bucket.take(0.5, 6_500);
    expect(bucket.state!.updatedAtMs).toBe(before.updatedAtMs);
  });

  it('huge idle gaps and epoch-sized clocks stay exact', () => {
    const bucket = new Bucket({ capacity: 1e9, refill: 1e9, periodMs: 1, maxDebt: 1e9 });
    expect(bucket.take(2e9, 1.7e12 + 0.123)).toMatchObject({ allowed: true, level: -1e9, resetMs: 2 });
    expect(bucket.take(1, 1.7e12 + 1e13)).toMatchObject({ allowed: true, level: 1e9 - 1 });
  });

  it('tiny refill rates cap waits at MAX_WAIT_MS instead of overflowing', () => {
    const slow = new Bucket({ capacity: 10, refill: 1e-300, periodMs: 31_536_000_000, maxDebt: 0 });
    expect(slow.take(10, 0)).toMatchObject({ allowed: true, resetMs: MAX_WAIT_MS });
    expect(slow.take(1, 1e12)).toMatchObject({
      allowed: false,
      retryAfterMs: MAX_WAIT_MS,
      resetMs: MAX_WAIT_MS,
    });
    // the rate underflows to exactly 0 (refill itself, elapsed · refill / period, keeps a denormal): no NaN anywhere
    const stuck = { capacity: 10, refill: Number.MIN_VALUE, periodMs: 1e7, maxDebt: 0 };
    expect(refillRatePerMs(stuck)).toBe(0);
    const d = new Bucket(stuck);
    d.take(10, 0);
    const later = d.take(1, 1e15);
    expect(later).toMatchObject({ allowed: false, retryAfterMs: MAX_WAIT_MS, resetMs: MAX_WAIT_MS });
    expect(later.level >= 0 && later.level < 1e-300).toBe(true);
    // a rate of ~1e9 tokens per ms refills in a single ms
    const fast = new Bucket({ capacity: 1, refill: 1e12, periodMs: 1_000, maxDebt: 0 });
    fast.take(1, 0.5);
    expect(fast.take(1, 0.5)).toMatchObject({ allowed: false, retryAfterMs: 1, resetMs: 1 });
  });

  it('rejects limits, costs and clocks out of range with a coded error', () => {
    const bad: [BucketLimits, number, number][] = [
      [{ ...spec(0), capacity: 0 }, 1, 0],
      [{ ...spec(0), refill: -1 }, 1, 0],
      [{ ...spec(0), periodMs: Number.NaN }, 1, 0],
      [{ ...spec(0), maxDebt: -1 }, 1, 0],
      [{ ...spec(0), capacity: Infinity }, 1, 0],
      [spec(0), 0, 0],
      [spec(0), Infinity, 0],
      [spec(0), 1, Number.NaN],
    ];
    for (const [limits, cost, nowMs] of bad) {
      expect(() => decide(undefined, limits, cost, nowMs)).toThrow(LimitArgumentError);
    }
    expect(() => decide(undefined, spec(0), -1, 0)).toThrow(
      expect.objectContaining({ code: 'LIMIT_INVALID_ARGUMENT', message: 'cost must be > 0, got -1' }),
    );
  });

  it('an empty bucket takes capacityRefillMs to fill, capped at MAX_WAIT_MS', () => {
    expect(capacityRefillMs({ capacity: 100, refill: 100, periodMs: 60_000, maxDebt: 100 })).toBe(60_000);
    expect(capacityRefillMs({ capacity: 10, refill: 3, periodMs: 1_000, maxDebt: 0 })).toBe(3_334);
    expect(capacityRefillMs({ capacity: 10, refill: 1e-300, periodMs: 1_000, maxDebt: 0 })).toBe(MAX_WAIT_MS);
  });
});

interface Step {
  nowMs: number;
  cost: number;
  before: BucketState | undefined;
  after: BucketState | undefined;
  decision: Verdict;
}

/** Replays a scenario like a store does, recording every step. */
function replay({ limits, startMs, ops }: Scenario): Step[] {
  const bucket = new Bucket(limits);
  let nowMs = startMs;
  return ops.map(({ stepMs, cost }) => {
    nowMs += stepMs;
    const before = bucket.state;
    const decision = bucket.take(cost, nowMs);
    return { nowMs, cost, before, after: bucket.state, decision };
  });
}

describe('properties over random limits, costs and clock steps', () => {
  it('the tokens admitted over any span T never exceed capacity + maxDebt + rate·T', () => {
    fc.assert(
      fc.property(scenarioArb(80), (scenario) => {
        const { capacity, maxDebt } = scenario.limits;
        const rate = refillRatePerMs(scenario.limits);
        const admitted = replay(scenario).filter((s) => s.decision.allowed);
        for (let i = 0; i < admitted.length; i++) {
          let tokens = 0;
          for (let j = i; j < admitted.length; j++) {
            tokens += admitted[j]!.cost;
            const bound = capacity + maxDebt + rate * (admitted[j]!.nowMs - admitted[i]!.nowMs);
            // plain comparison in the O(n²) loop; `expect` only on a violation
            if (tokens > bound + 1e-9 * (bound + tokens))
              expect({ i, j, tokens }).toEqual({ i, j, tokens: bound });
          }
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('the balance always stays within [−maxDebt, capacity]', () => {
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        const { capacity, maxDebt } = scenario.limits;
        const within = (b: number) => b >= -maxDebt && b <= capacity;
        for (const { decision, after } of replay(scenario)) {
          if (!within(decision.level) || (after && !within(after.balance))) {
            expect({ reported: decision.level, stored: after?.balance }).toEqual({
              within: [-maxDebt, capacity],
            });
          }
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('a denied request leaves the bucket unchanged', () => {
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        for (const { decision, before, after, nowMs } of replay(scenario)) {
          if (decision.allowed) continue;
          expect(after).toBe(before);
          const expected = before ? balanceAt(before, scenario.limits, nowMs) : scenario.limits.capacity;
          expect(decision.level).toBe(expected);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('retryAfterMs is exact: denied one ms earlier, admitted on time', () => {
    let checked = 0;
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        const { limits } = scenario;
        for (const { decision, before, nowMs, cost } of replay(scenario)) {
          if (decision.allowed) {
            expect(decision.retryAfterMs).toBe(0);
            continue;
          }
          const wait = decision.retryAfterMs;
          expect(Number.isInteger(wait) && wait >= 0 && wait <= MAX_WAIT_MS).toBe(true);
          if (!canEverAdmit(limits, cost)) {
            expect(wait).toBe(decision.resetMs);
            continue;
          }
          expect(wait).toBeGreaterThanOrEqual(1);
          if (wait === MAX_WAIT_MS) continue;
          checked++;
          expect(decide(before, limits, cost, nowMs + wait).decision.allowed).toBe(true);
          expect(decide(before, limits, cost, nowMs + (wait - 1)).decision.allowed).toBe(false);
        }
      }),
      { numRuns: RUNS },
    );
    expect(checked).toBeGreaterThan(RUNS);
  });

  it('resetMs is exact: full on time, not full one ms earlier', () => {
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        const { limits } = scenario;
        for (const { decision, before, after, nowMs } of replay(scenario)) {
          const state = decision.allowed ? after : before;
          const full = decision.resetMs;
          expect(Number.isInteger(full) && full >= 0 && full <= MAX_WAIT_MS).toBe(true);
          if (!state) {
            expect(full).toBe(0);
            continue;
          }
          if (full === MAX_WAIT_MS) continue;
          expect(balanceAt(state, limits, nowMs + full)).toBe(limits.capacity);
          if (full > 0) expect(balanceAt(state, limits, nowMs + (full - 1))).toBeLessThan(limits.capacity);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('under steady demand the admitted rate converges to refill/period', () => {
    // Requests come at least every `gapMs`. Tokens are lost only while the bucket sits full, and
    // after each such episode an admitted request must be refilled before the next, so
    // admitted ≥ rate·T − (2 + rate·T/cost)·rate·gap (one more gap before the first request); and admitted ≤ capacity + maxDebt + rate·T.
    const arb = fc
      .record({
        capacity: fc.double({ min: 1, max: 1_000, noNaN: true }),
        ratePerMs: fc.double({ min: 1e-4, max: 10, noNaN: true }),
        debtFactor: fc.double({ min: 0, max: 1, noNaN: true }),
        costFactor: fc.double({ min: 0.05, max: 1, noNaN: true }),
        seed: fc.integer(),
      })
      .map(({ capacity, ratePerMs, debtFactor, costFactor, seed }) => ({
        limits: { capacity, refill: ratePerMs * 1_000, periodMs: 1_000, maxDebt: capacity * debtFactor },
        cost: capacity * costFactor,
        seed,
      }));
    fc.assert(
      fc.property(arb, ({ limits, cost, seed }) => {
        const rate = refillRatePerMs(limits);
        const gapMs = (0.02 * cost) / rate;
        const bucket = new Bucket(limits);
        let random = seed >>> 0;
        let nowMs = 0;
        let tokens = 0;
        for (let i = 0; i < 2_000; i++) {
          random = (Math.imul(random, 1_664_525) + 1_013_904_223) >>> 0;
          nowMs += (random / 2 ** 32) * gapMs;
          if (bucket.take(cost, nowMs).allowed) tokens += cost;
        }
        const refilled = rate * nowMs;
        const slack = 1e-9 * (refilled + tokens + limits.capacity + limits.maxDebt);
        expect(tokens).toBeLessThanOrEqual(limits.capacity + limits.maxDebt + refilled + slack);
        expect(tokens).toBeGreaterThanOrEqual(refilled - (2 + refilled / cost) * rate * gapMs - slack);
      }),
      { numRuns: 1_000 },
    );
  });

  it('over a long run the admitted rate is refill/period (1 token/s, an hour of requests every 10 ms)', () => {
    const bucket = new Bucket(spec(10));
    let tokens = 0;
    for (let nowMs = 0; nowMs <= 3_600_000; nowMs += 10) if (bucket.take(1, nowMs).allowed) tokens++;
    // the first burst, then one per second (the last one may fall just past the hour)
    expect(tokens).toBeGreaterThanOrEqual(3_609);
    expect(tokens).toBeLessThanOrEqual(3_610);
  });
});
