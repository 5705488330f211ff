/**
 * Random request lifecycles (docs/lifecycle.md) through the in-process store and Redis on one simulated clock:
 * requests take a token bucket, a sliding window and a concurrency slot at once; each admitted request
 * then ends one way or another (charged its real cost, refunded, given back only as a client that went
 * away, or lost with its gateway), and may have its slot renewed while it runs. Checked, for every run:
 * - TypeScript and Lua agree bit for bit on every admission and every settlement;
 * - slots held never exceed `max`, and once every exchange has ended (and lost slots expired) nothing
 *   is in flight;
 * - the bucket never admits more than `capacity + maxDebt + rate·T` plus what was given back.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertSlotsArguments } from './algorithms/concurrency/model.js';
import { acquireFrom, settleFrom } from './engine.js';
import {
  type ConcurrencySpec,
  type LimitCheck,
  limitKey,
  type SettledLimit,
  type Settlement,
  type SlidingWindowSpec,
  type StoreDecision,
  type TokenBucketSpec,
} from './limits.js';
import { MemoryStore } from './memory-store.js';
import type { Store } from './store.js';
import { bucketSpecArb, specCostArb, specStepMsArb, windowSpecArb } from './test-arbitraries.js';
import { SimulatedClock } from './test-clock.js';
import { openTestRedis, type TestRedis } from './test-redis.js';
import { ReferenceTable, SIMULATION_TTL_MS, sameDecision } from './test-reference.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('lifecycle');
});
afterAll(async () => {
  await redis?.close();
});

/** how a step ends an open request; `renew` keeps it open, its slot renewed */
type Ending = 'charge' | 'refund' | 'release' | 'lost' | 'renew';

interface Step {
  stepMs: number;
  /** start a request, or end the open request at `pick` (modulo the open ones) */
  start: boolean;
  cost: number;
  pick: number;
  ending: Ending;
  /** the real cost a charge states, as a multiple of the admitted one (0 … 3) */
  actualFactor: number;
}

interface Lifecycle {
  bucket: TokenBucketSpec;
  window: SlidingWindowSpec;
  slots: ConcurrencySpec;
  startMs: number;
  refundMax: number;
  steps: Step[];
}

const lifecycleArb: fc.Arbitrary<Lifecycle> = fc
  .record({
    bucket: bucketSpecArb,
    window: windowSpecArb,
    slots: fc.record({
      algorithm: fc.constant('concurrency' as const),
      max: fc.integer({ min: 1, max: 5 }),
      leaseMs: fc.oneof(fc.constantFrom(1, 1_000, 35_000), fc.integer({ min: 1, max: 100_000 })),
    }),
    startMs: fc.integer({ min: 1_600_000_000_000, max: 2_000_000_000_000 }),
    // the rule's refund.max (0: each limit's default, its capacity or max)
    refundMax: fc.oneof(fc.constant(0), fc.double({ min: 0.01, max: 1e3, noNaN: true })),
  })
  .chain((limits) =>
    fc.record({
      ...Object.fromEntries(Object.entries(limits).map(([k, v]) => [k, fc.constant(v)])),
      steps: fc.array(
        fc.record({
          stepMs: fc.oneof(
            specStepMsArb(limits.bucket),
            fc.integer({ min: 0, max: 2 * limits.slots.leaseMs }),
          ),
          start: fc.boolean(),
          cost: specCostArb(limits.bucket),
          pick: fc.nat(),
          ending: fc.constantFrom<Ending>('charge', 'charge', 'refund', 'release', 'lost', 'renew', 'renew'),
          actualFactor: fc.oneof(fc.constantFrom(0, 1), fc.double({ min: 0, max: 3, noNaN: true })),
        }),
        { minLength: 20, maxLength: 80, size: 'max' },
      ),
    }),
  ) as fc.Arbitrary<Lifecycle>;

/** refund.max's default: the limit's capacity or max. */
function scaleOfRefund(spec: TokenBucketSpec | SlidingWindowSpec): number {
  return spec.algorithm === 'token-bucket' ? spec.capacity : spec.max;
}

/** A store a lifecycle is replayed on, and its simulated clock. */
interface Simulated {
  store: Store;
  clock: SimulatedClock;
}

let totals = { operations: 0, admissions: 0, settlements: 0, renewals: 0, lost: 0 };

/**
 * Plays `life` on the reference engine, checking the bounds as it goes, and returns the calls to replay
 * on the stores with the reference's answers.
 */
function playReference(life: Lifecycle, run: string) {
  const table = new ReferenceTable();
  const keys = {
    bucket: limitKey('', run, 'bucket', 'c'),
    window: limitKey('', run, 'window', 'c'),
    slots: limitKey('', run, 'slots:slots', 'c'),
  };
  const chargeMax = Math.max(life.bucket.capacity + life.bucket.maxDebt, life.window.max);
  const calls: (
    | { kind: 'acquire'; checks: LimitCheck[]; atMs: number; expected: StoreDecision }
    | {
        kind: 'settle';
        settlements: Settlement[];
        atMs: number;
        expected: SettledLimit[];
      }
  )[] = [];
  const open: { leaseId: string; cost: number; admittedAtMs: number }[] = [];
  let nowMs = life.startMs;
  let admitted = 0;
  let extra = 0;
  let givenBack = 0;
  let id = 0;
  const rate = life.bucket.refill / life.bucket.periodMs;
  const slotsOf = (leaseId: string, renew = false): Settlement => ({
    key: keys.slots,
    spec: life.slots,
    delta: 0,
    admittedAtMs: 0,
    leaseId,
    ...(renew && { renew }),
  });
  for (const step of life.steps) {
    nowMs += step.stepMs;
    if (step.start || open.length === 0) {
      const leaseId = `${run}-${++id}`;
      const checks: LimitCheck[] = [
        { key: keys.bucket, spec: life.bucket, cost: step.cost },
        { key: keys.window, spec: life.window, cost: step.cost },
        { key: keys.slots, spec: life.slots, cost: 1, leaseId },
      ];
      const expected = acquireFrom(table, checks, nowMs);
      calls.push({ kind: 'acquire', checks, atMs: nowMs, expected });
      expect(expected.limits[2]!.level).toBeLessThanOrEqual(life.slots.max);
      if (expected.allowed) {
        admitted += step.cost;
        open.push({ leaseId, cost: step.cost, admittedAtMs: nowMs });
        // docs/lifecycle.md: tokens admitted since the start (a full bucket) never exceed this, plus what came back
        const bound = life.bucket.capacity + life.bucket.maxDebt + rate * (nowMs - life.startMs) + givenBack;
        expect(admitted + extra).toBeLessThanOrEqual(bound * (1 + 1e-9) + 1e-9);
      }
      continue;
    }
    if (step.ending === 'renew') {
      // the exchange runs on: its slot is kept for another leaseMs (or stays gone if it expired)
      const settlements = [slotsOf(open[step.pick % open.length]!.leaseId, true)];
      calls.push({
        kind: 'settle',
        settlements,
        atMs: nowMs,
        expected: settleFrom(table, settlements, nowMs),
      });
      totals.renewals++;
      continue;
    }
    const [request] = open.splice(step.pick % open.length, 1);
    const { leaseId, cost, admittedAtMs } = request!;
    if (step.ending === 'lost') {
      totals.lost++;
      continue; // its gateway died: nobody gives anything back
    }
    const settlements: Settlement[] = [];
    if (step.ending !== 'release') {
      const delta = step.ending === 'refund' ? -cost : Math.min(cost * step.actualFactor, chargeMax) - cost;
      if (delta !== 0) {
        // a refund is bounded by refund.max per period (SPEC §5)
        const refundMax = (spec: TokenBucketSpec | SlidingWindowSpec) =>
          step.ending !== 'refund'
            ? {}
            : { refundMax: life.refundMax > 0 ? life.refundMax : scaleOfRefund(spec) };
        settlements.push({
          key: keys.bucket,
          spec: life.bucket,
          delta,
          admittedAtMs,
          ...refundMax(life.bucket),
        });
        settlements.push({
          key: keys.window,
          spec: life.window,
          delta,
          admittedAtMs,
          ...refundMax(life.window),
        });
        if (delta < 0) givenBack -= delta;
        else extra += delta;
      }
    }
    settlements.push(slotsOf(leaseId));
    const expected = settleFrom(table, settlements, nowMs);
    calls.push({ kind: 'settle', settlements, atMs: nowMs, expected });
  }
  // every exchange still open ends now; lost slots expire with their lease: nothing stays in flight
  for (const request of open) {
    const settlements = [slotsOf(request.leaseId)];
    calls.push({ kind: 'settle', settlements, atMs: nowMs, expected: settleFrom(table, settlements, nowMs) });
  }
  nowMs += life.slots.leaseMs;
  const probe: LimitCheck[] = [{ key: keys.slots, spec: life.slots, cost: 1, leaseId: `${run}-probe` }];
  const last = acquireFrom(table, probe, nowMs);
  expect(last.limits[0]!.level).toBe(1); // only the probe itself
  calls.push({ kind: 'acquire', checks: probe, atMs: nowMs, expected: last });
  return calls;
}

/** What a store answers to a lifecycle, in order (all sent without waiting: one connection keeps order). */
async function replay(
  { store, clock }: Simulated,
  calls: ReturnType<typeof playReference>,
  label: string,
): Promise<void> {
  const sent = calls.map((call) =>
    call.kind === 'acquire'
      ? clock.at(call.atMs, () => store.acquire(call.checks))
      : clock.at(call.atMs, () => store.settle(call.settlements)),
  );
  const answers = await Promise.all(sent);
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!;
    const answer = answers[i]!;
    const same =
      call.kind === 'acquire'
        ? sameDecision(answer as StoreDecision, call.expected)
        : (answer as SettledLimit[]).every(
            (s, j) =>
              Object.is(s.level, call.expected[j]!.level) &&
              s.remaining === call.expected[j]!.remaining &&
              s.resetMs === call.expected[j]!.resetMs,
          );
    if (!same) expect({ label, i, call, answer }).toEqual({ label, i, call, answer: call.expected });
  }
}

describe('request lifecycles: admission, charge, refund, release, loss', () => {
  it('TS and Lua agree; slots never exceed max and all come back; the bucket bound holds (10,000+ operations)', async () => {
    let run = 0;
    totals = { operations: 0, admissions: 0, settlements: 0, renewals: 0, lost: 0 };
    const memoryClock = new SimulatedClock();
    const memory = {
      store: new MemoryStore({ sweepIntervalMs: 0, now: memoryClock.now, minTtlMs: SIMULATION_TTL_MS }),
      clock: memoryClock,
    };
    const onRedis = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
    await fc.assert(
      fc.asyncProperty(lifecycleArb, async (life) => {
        const runId = `life-${++run}-${Math.random().toString(36).slice(2)}`;
        const calls = playReference(life, runId);
        await replay(memory, calls, 'memory');
        await replay(onRedis, calls, 'redis');
        totals.operations += calls.length;
        totals.admissions += calls.filter((c) => c.kind === 'acquire' && c.expected.allowed).length;
        totals.settlements += calls.filter((c) => c.kind === 'settle').length;
      }),
      { numRuns: 250 },
    );
    await memory.store.close();
    console.log(`lifecycle property: ${JSON.stringify(totals)}`);
    expect(totals.operations).toBeGreaterThanOrEqual(10_000);
  }, 300_000);

  it('refund.max: a bucket of 5 (1 per hour) whose every request is refunded admits 10 in the hour, then 6 the next hour (both stores)', async () => {
    const spec: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 5,
      refill: 1,
      periodMs: 3_600_000,
      maxDebt: 0,
    };
    const memoryClock = new SimulatedClock();
    const stores: Simulated[] = [
      { store: new MemoryStore({ sweepIntervalMs: 0, now: memoryClock.now }), clock: memoryClock },
      redis.simulated(),
    ];
    const run = `refund-max-${Math.random().toString(36).slice(2)}`;
    const key = limitKey('', run, 'calls', 'c');
    for (const { store, clock } of stores) {
      const startMs = 1_700_000_000_000;
      let admitted = 0;
      // 40 requests over a minute, each answered with a refundable status
      for (let i = 0; i < 40; i++) {
        const atMs = startMs + i * 1_500;
        const decision = await clock.at(atMs, () => store.acquire([{ key, spec, cost: 1 }]));
        if (!decision.allowed) continue;
        admitted++;
        const refund = { key, spec, delta: -1, admittedAtMs: decision.atMs!, refundMax: 5 };
        await clock.at(atMs + 100, () => store.settle([refund]));
      }
      expect(admitted).toBe(10); // capacity 5, plus refund.max 5: not 40
      // an hour later the refund level has drained and one token has come back: 5 refunds and 1 token
      const later = startMs + 3_600_000 + 60_000;
      admitted = 0;
      for (let i = 0; i < 40; i++) {
        const atMs = later + i * 1_500;
        const decision = await clock.at(atMs, () => store.acquire([{ key, spec, cost: 1 }]));
        if (!decision.allowed) continue;
        admitted++;
        const refund = { key, spec, delta: -1, admittedAtMs: decision.atMs!, refundMax: 5 };
        await clock.at(atMs + 100, () => store.settle([refund]));
      }
      expect(admitted).toBe(6);
    }
    await stores[0]!.store.close();
  });

  it('a renewed slot outlives its first expiry; one renewed too late is not taken again (both stores)', async () => {
    const spec: ConcurrencySpec = { algorithm: 'concurrency', max: 1, leaseMs: 1_000 };
    const memoryClock = new SimulatedClock();
    const stores: Simulated[] = [
      { store: new MemoryStore({ sweepIntervalMs: 0, now: memoryClock.now }), clock: memoryClock },
      redis.simulated(),
    ];
    for (const [i, { store, clock }] of stores.entries()) {
      const key = limitKey('', `renew-${i}-${Math.random().toString(36).slice(2)}`, 'slots:slots', 'c');
      const take = (leaseId: string, atMs: number) =>
        clock.at(atMs, () => store.acquire([{ key, spec, cost: 1, leaseId }]));
      const renew = (leaseId: string, atMs: number) =>
        clock.at(atMs, () => store.settle([{ key, spec, delta: 0, admittedAtMs: 0, leaseId, renew: true }]));
      const t0 = 1_700_000_000_000;
      expect((await take('a', t0)).allowed).toBe(true);
      expect((await renew('a', t0 + 900))[0]).toMatchObject({ level: 1 });
      // without the renewal, a's slot would have expired at t0 + 1000
      expect((await take('b', t0 + 1_500)).allowed).toBe(false);
      expect((await take('b', t0 + 1_900)).allowed).toBe(true);
      // a's renewal comes after its expiry, and b holds the one slot: a is not taken again
      expect((await renew('a', t0 + 2_000))[0]).toMatchObject({ level: 1 });
      expect((await take('c', t0 + 2_100)).allowed).toBe(false);
      // nor is a slot given back: renewing it changes nothing
      await clock.at(t0 + 2_200, () =>
        store.settle([{ key, spec, delta: 0, admittedAtMs: 0, leaseId: 'b' }]),
      );
      expect((await renew('b', t0 + 2_300))[0]).toMatchObject({ level: 0 });
      expect((await take('c', t0 + 2_400)).allowed).toBe(true);
    }
    await stores[0]!.store.close();
  });

  it('a store call renews or settles, never both, and renews only concurrency slots', async () => {
    const slots: ConcurrencySpec = { algorithm: 'concurrency', max: 1, leaseMs: 1_000 };
    const bucket: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 1,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 0,
    };
    const memory = new MemoryStore({ sweepIntervalMs: 0 });
    const renewal = { key: 'k1', spec: slots, delta: 0, admittedAtMs: 0, leaseId: 'x', renew: true };
    await expect(
      memory.settle([renewal, { key: 'k2', spec: slots, delta: 0, admittedAtMs: 0, leaseId: 'y' }]),
    ).rejects.toThrow(/never both/);
    await expect(
      memory.settle([{ key: 'k3', spec: bucket, delta: 0, admittedAtMs: 0, renew: true }]),
    ).rejects.toThrow(/only a concurrency slot/);
    await memory.close();
  });

  it('refuses a concurrency check whose cost is not 1 or whose max is not a whole number', () => {
    expect(() => assertSlotsArguments({ max: 2, leaseMs: 1_000 }, 2)).toThrow(/costs 1 slot/);
    expect(() => assertSlotsArguments({ max: 1.5, leaseMs: 1_000 }, 1)).toThrow(/integer/);
    expect(() => assertSlotsArguments({ max: 2, leaseMs: 0 }, 1)).toThrow(/leaseMs/);
  });
});
