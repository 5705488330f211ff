/**
 * Edits never corrupt state (issue 19), in the real Redis (127.0.0.1:6379, a key prefix of its own) and
 * in the TypeScript engine, on one simulated clock: one limit under one key is edited at random (its
 * numbers, its window, its algorithm) between random requests and settlements (refunds and partial
 * give-backs, some computed for a version of the limit edited since). Checked at every step:
 * - Lua and TypeScript agree bit for bit (admissions and settlements, dropped ones included);
 * - every wait (Retry-After, and the time until the quota is whole, which is the key's time to live)
 *   is within what the rule in force allows: a token bucket's `(capacity + maxDebt) / rate`, a sliding
 *   window's two windows;
 * - no window admits more than its `max` (plus what its own version gave back), no token bucket more
 *   than `capacity + maxDebt + rate·T` since the edit (plus the same), whatever older settlements arrive.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_WAIT_MS } from './algorithms/wait.js';
import { acquireFrom, settleFrom } from './engine.js';
import {
  type LimitCheck,
  type LimitSpec,
  limitKey,
  type SettledLimit,
  type SlidingWindowSpec,
  type TokenBucketSpec,
} from './limits.js';
import { bucketSpecArb, windowSpecArb } from './test-arbitraries.js';
import { openTestRedis, type TestRedis } from './test-redis.js';
import { ReferenceTable, SIMULATION_TTL_MS, sameDecision } from './test-reference.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('edits');
});
afterAll(async () => {
  await redis?.close();
});

const SECOND = 1_000;
const HOUR = 3_600_000;

/** Numbers an admin writes (so that edits often keep some of them), beside any numbers at all. */
const typicalBucketArb: fc.Arbitrary<TokenBucketSpec> = fc
  .record({
    capacity: fc.constantFrom(1, 2, 5, 10, 100),
    refill: fc.constantFrom(1, 5, 10),
    periodMs: fc.constantFrom(SECOND, 10 * SECOND, 60 * SECOND, HOUR),
    debt: fc.constantFrom(0, 1, -1),
  })
  .map(({ capacity, refill, periodMs, debt }) => ({
    algorithm: 'token-bucket' as const,
    capacity,
    refill,
    periodMs,
    maxDebt: debt < 0 ? capacity : debt,
  }));
const typicalWindowArb: fc.Arbitrary<SlidingWindowSpec> = fc.record({
  algorithm: fc.constant('sliding-window' as const),
  max: fc.constantFrom(1, 2, 5, 10, 100),
  windowMs: fc.constantFrom(SECOND, 10 * SECOND, 60 * SECOND, HOUR, 24 * HOUR),
});
const editArb: fc.Arbitrary<LimitSpec> = fc.oneof(
  { weight: 4, arbitrary: typicalBucketArb },
  { weight: 4, arbitrary: typicalWindowArb },
  { weight: 1, arbitrary: bucketSpecArb },
  { weight: 1, arbitrary: windowSpecArb },
);

type Step =
  | { kind: 'edit'; spec: LimitSpec }
  /** `stepFraction` of the limit's recovery time (or a few ms) passes, then a request of `costKind` */
  | { kind: 'request'; small: boolean; stepFraction: number; costKind: number }
  /** the open request at `pick` ends: `giveBack` of its cost back (1: a refund) */
  | { kind: 'settle'; pick: number; giveBack: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 1, arbitrary: editArb.map((spec) => ({ kind: 'edit' as const, spec })) },
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('request' as const),
      small: fc.boolean(),
      stepFraction: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 0.6, noNaN: true })),
      costKind: fc.oneof(fc.constantFrom(1, 1, 1, 0.5, 2), fc.double({ min: 0.001, max: 1.1, noNaN: true })),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('settle' as const),
      pick: fc.nat(),
      giveBack: fc.oneof(fc.constant(1), fc.double({ min: 0.01, max: 1, noNaN: true })),
    }),
  },
);

const scenarioArb = fc.record({
  first: editArb,
  startMs: fc.integer({ min: 1_600_000_000_000, max: 2_000_000_000_000 }),
  steps: fc.array(stepArb, { minLength: 30, maxLength: 120, size: 'max' }),
});

/** The tag a version's state records (state-tag.ts): what tells versions apart. */
function tagOf(spec: LimitSpec): string {
  if (spec.algorithm === 'token-bucket') return `T${spec.capacity}/${spec.refill}/${spec.periodMs}`;
  if (spec.algorithm === 'sliding-window') return `W${spec.max}/${spec.windowMs}`;
  return 'C';
}

/** Ms for the whole quota to come back: a token bucket from empty, a window's two windows. */
function recoveryMs(spec: LimitSpec): number {
  if (spec.algorithm === 'token-bucket') return (spec.capacity * spec.periodMs) / spec.refill;
  if (spec.algorithm === 'sliding-window') return 2 * spec.windowMs;
  return 0;
}

function scaleOf(spec: LimitSpec): number {
  if (spec.algorithm === 'token-bucket') return spec.capacity + spec.maxDebt;
  if (spec.algorithm === 'sliding-window') return spec.max;
  return 1;
}

/**
 * The longest wait the rule in force allows: a token bucket from its deepest debt (`debtMax`: the largest
 * `maxDebt` any version with its tag had, as only those numbers wrote its state) to full; a window, two
 * windows. Whole ms, with room for the search's rounding.
 */
function longestWaitMs(spec: LimitSpec, debtMax: number): number {
  if (spec.algorithm === 'token-bucket') {
    const ms = ((spec.capacity + debtMax) * spec.periodMs) / spec.refill;
    return Math.min(MAX_WAIT_MS, Math.ceil(ms * (1 + 1e-9)) + 2);
  }
  if (spec.algorithm === 'sliding-window') return Math.min(MAX_WAIT_MS, 2 * spec.windowMs + 2);
  return 1_000;
}

interface Open {
  cost: number;
  admittedAtMs: number;
  spec: LimitSpec;
  tag: string;
}

const totals = { requests: 0, denials: 0, edits: 0, settlements: 0, stale: 0, dropped: 0 };

describe('edits never corrupt state', () => {
  it('random edits between random traffic: waits within the rule in force, no window above its max, TS ≡ Lua', async () => {
    const { store, clock } = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenarioArb, async ({ first, startMs, steps }) => {
        const key = limitKey('', `edits-${++run}-${Math.random().toString(36).slice(2)}`, 'a', 'client');
        const table = new ReferenceTable();
        let spec = first;
        let nowMs = startMs;
        // the version in force since the last edit that changed its tag
        let epoch = { tag: tagOf(spec), startMs: nowMs, admitted: 0, givenBack: 0 };
        const perWindow = new Map<number, number>(); // window index → cost admitted minus given back
        const debtByTag = new Map<string, number>();
        const noteDebt = (s: LimitSpec) => {
          if (s.algorithm === 'token-bucket')
            debtByTag.set(tagOf(s), Math.max(debtByTag.get(tagOf(s)) ?? 0, s.maxDebt));
        };
        noteDebt(spec);
        const open: Open[] = [];

        for (const step of steps) {
          if (step.kind === 'edit') {
            totals.edits++;
            spec = step.spec;
            noteDebt(spec);
            if (tagOf(spec) !== epoch.tag) {
              epoch = { tag: tagOf(spec), startMs: nowMs, admitted: 0, givenBack: 0 };
              perWindow.clear();
            }
            continue;
          }
          if (step.kind === 'settle') {
            if (open.length === 0) continue;
            const [request] = open.splice(step.pick % open.length, 1);
            const { cost, admittedAtMs, tag } = request!;
            const delta = -cost * step.giveBack;
            const settlements = [{ key, spec: request!.spec, delta, admittedAtMs }];
            const expected = settleFrom(table, settlements, nowMs);
            const actual = await clock.at(nowMs, () => store.settle(settlements));
            expect(sameSettled(actual[0]!, expected[0]!), JSON.stringify({ expected, actual })).toBe(true);
            totals.settlements++;
            if (tag !== epoch.tag) totals.stale++;
            if (actual[0]!.dropped) totals.dropped++;
            // only what this version admitted may come back to it
            if (tag === epoch.tag) {
              epoch.givenBack += -delta;
              if (spec.algorithm === 'sliding-window') {
                const index = Math.floor(admittedAtMs / spec.windowMs);
                perWindow.set(index, (perWindow.get(index) ?? 0) + delta);
              }
            }
            continue;
          }

          nowMs += step.small ? Math.round(step.stepFraction * 5_000) : step.stepFraction * recoveryMs(spec);
          const cost =
            step.costKind <= 1.1 && !Number.isInteger(step.costKind) && step.costKind !== 0.5
              ? Math.max(step.costKind * scaleOf(spec), 1e-3)
              : step.costKind;
          const checks: LimitCheck[] = [{ key, spec, cost }];
          const expected = acquireFrom(table, checks, nowMs);
          const actual = await clock.at(nowMs, () => store.acquire(checks));
          expect(sameDecision(actual, expected), JSON.stringify({ spec, cost, expected, actual })).toBe(true);
          totals.requests++;

          const outcome = actual.limits[0]!;
          const longest = longestWaitMs(spec, debtByTag.get(tagOf(spec)) ?? 0);
          expect(outcome.retryAfterMs, `Retry-After under ${JSON.stringify(spec)}`).toBeLessThanOrEqual(
            longest,
          );
          expect(outcome.resetMs, `time to live under ${JSON.stringify(spec)}`).toBeLessThanOrEqual(longest);
          if (!actual.allowed) {
            totals.denials++;
            continue;
          }
          open.push({ cost, admittedAtMs: actual.atMs!, spec, tag: tagOf(spec) });
          epoch.admitted += cost;
          if (spec.algorithm === 'sliding-window') {
            const index = Math.floor(nowMs / spec.windowMs);
            const counted = (perWindow.get(index) ?? 0) + cost;
            perWindow.set(index, counted);
            expect(counted, `window ${index} of ${JSON.stringify(spec)}`).toBeLessThanOrEqual(
              spec.max * (1 + 1e-9) + 1e-9,
            );
          } else if (spec.algorithm === 'token-bucket') {
            const debt = debtByTag.get(tagOf(spec)) ?? 0;
            const bound =
              spec.capacity +
              debt +
              (spec.refill * (nowMs - epoch.startMs)) / spec.periodMs +
              epoch.givenBack;
            expect(epoch.admitted, `bucket ${JSON.stringify(spec)}`).toBeLessThanOrEqual(
              bound * (1 + 1e-9) + 1e-9,
            );
          }
        }
      }),
      { numRuns: 250 },
    );
    console.log(`edits property: ${JSON.stringify(totals)}`);
    expect(totals.requests).toBeGreaterThan(5_000);
    expect(totals.stale).toBeGreaterThan(100);
  }, 600_000);
});

function sameSettled(a: SettledLimit, b: SettledLimit): boolean {
  return (
    Object.is(a.level, b.level) &&
    a.remaining === b.remaining &&
    a.resetMs === b.resetMs &&
    a.dropped === b.dropped
  );
}
