/**
 * peek (GET /usage) against what the next acquire sees: in both stores, after random traffic on a
 * simulated clock, reading a limit charges nothing and tells what the next request would be told.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limitKeyName } from './algorithms/index.js';
import {
  type ConcurrencySpec,
  type LimitCheck,
  type LimitOutcome,
  type LimitSpec,
  limitKey,
} from './limits.js';
import { MemoryStore } from './memory-store.js';
import { peekOutcomes, usageOf } from './peek.js';
import { peekRedis } from './peek-redis.js';
import { specArb, specCostArb, specStepMsArb } from './test-arbitraries.js';
import { openTestRedis, type TestRedis } from './test-redis.js';
import { SIMULATION_TTL_MS } from './test-reference.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('peek');
});
afterAll(() => redis.close());

const scenarioArb = specArb.chain((spec) =>
  fc.record({
    spec: fc.constant(spec),
    cost: specCostArb(spec),
    startMs: fc.integer({ min: 1_600_000_000_000, max: 1_800_000_000_000 }),
    steps: fc.array(fc.record({ stepMs: specStepMsArb(spec), cost: specCostArb(spec) }), {
      minLength: 0,
      maxLength: 25,
    }),
    peekStepMs: specStepMsArb(spec),
  }),
);

function expectSameAsNext(peeked: LimitOutcome, next: LimitOutcome, cost: number, bucket: boolean): void {
  expect(peeked.allowed).toBe(next.allowed);
  if (!next.allowed) {
    // a denial charges nothing: the next request is told exactly what peek said
    expect(peeked).toEqual(next);
    return;
  }
  expect(peeked.retryAfterMs).toBe(0);
  if (bucket) expect(next.level).toBe(peeked.level - cost);
  else expect(next.level).toBeCloseTo(peeked.level + cost, 6);
}

describe('peek', () => {
  it('agrees with the next acquire, in the memory store and in Redis (bit for bit between them)', async () => {
    const { store: simulated, clock } = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenarioArb, async ({ spec, cost, startMs, steps, peekStepMs }) => {
        run++;
        const memory = new MemoryStore({ sweepIntervalMs: 0, now: clock.now, minTtlMs: SIMULATION_TTL_MS });
        const key = limitKey('', 'peek-rule', '', `ip:10.0.0.${run % 250}-${run}`);
        let t = startMs;
        for (const step of steps) {
          t += step.stepMs;
          const check: LimitCheck[] = [{ key, spec, cost: step.cost }];
          await clock.at(t, () => memory.acquire(check));
          await clock.at(t, () => simulated.acquire(check));
        }
        t += peekStepMs;
        const checks: LimitCheck[] = [{ key, spec, cost }];
        const { states } = memory.peekStates([key], t);
        const fromMemory = peekOutcomes(checks, states, t);
        const fromRedis = await peekRedis(redis.store.client, redis.prefix, checks, t);
        expect(fromRedis).toEqual(fromMemory);
        // peeking twice changes nothing
        expect(peekOutcomes(checks, memory.peekStates([key], t).states, t)).toEqual(fromMemory);
        const next = await clock.at(t, () => memory.acquire(checks));
        const nextRedis = await clock.at(t, () => simulated.acquire(checks));
        expectSameAsNext(fromMemory[0]!, next.limits[0]!, cost, spec.algorithm === 'token-bucket');
        expectSameAsNext(fromRedis[0]!, nextRedis.limits[0]!, cost, spec.algorithm === 'token-bucket');
        await memory.close();
      }),
      { numRuns: 150 },
    );
  });

  it('reads Redis TIME when no clock is given, and reports debt and seconds until full', async () => {
    const spec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 10,
    } as const;
    const checks: LimitCheck[] = [{ key: limitKey('', 'peek-time', 'x', 'global'), spec, cost: 1 }];
    const empty = await peekRedis(redis.store.client, redis.prefix, checks);
    expect(usageOf(spec, empty[0]!)).toEqual({ remaining: 10, debt: 0, inFlight: 0, fullInSeconds: 0 });
    await redis.store.acquire([{ ...checks[0]!, cost: 15 }]);
    const after = await peekRedis(redis.store.client, redis.prefix, checks);
    const usage = usageOf(spec, after[0]!);
    expect(usage.remaining).toBe(0);
    expect(usage.debt).toBeGreaterThan(4.9);
    expect(usage.debt).toBeLessThanOrEqual(5);
    expect(usage.fullInSeconds).toBe(15);
    expect(after[0]!.allowed).toBe(false);
  });

  it('reports the slots a concurrency limit holds: remaining max − 2 and 2 in flight, read on Redis TIME', async () => {
    const spec: ConcurrencySpec = { algorithm: 'concurrency', max: 5, leaseMs: 35_000 };
    const key = limitKey('', 'peek-slots', limitKeyName(spec, 'inflight'), 'ip:10.0.0.1');
    const checks: LimitCheck[] = [{ key, spec, cost: 1 }];
    await redis.store.acquire([{ ...checks[0]!, leaseId: 'request-1' }]);
    await redis.store.acquire([{ ...checks[0]!, leaseId: 'request-2' }]);
    const [outcome] = await peekRedis(redis.store.client, redis.prefix, checks);
    expect(usageOf(spec, outcome!)).toEqual({ remaining: 3, debt: 0, inFlight: 2, fullInSeconds: 0 });
    expect(outcome!.allowed).toBe(true);
    // peeking took no slot
    expect(await redis.admin.zcard(redis.prefix + key)).toBe(2);
  });

  it('reads every limit of a stacked rule in one go, across hash tags, as the in-process store does', async () => {
    const bucket: LimitSpec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 10,
    };
    const window: LimitSpec = { algorithm: 'sliding-window', max: 10, windowMs: 60_000 };
    const slots: LimitSpec = { algorithm: 'concurrency', max: 3, leaseMs: 10_000 };
    const client = 'header:alice';
    const check = (name: string, spec: LimitSpec, clientKey = client, cost = 1): LimitCheck => ({
      key: limitKey('', 'peek-stacked', limitKeyName(spec, name), clientKey),
      spec,
      cost,
    });
    const checks = [
      check('burst', bucket),
      check('daily', window),
      check('inflight', slots),
      check('everyone', bucket, 'global'),
    ];
    const { store: simulated, clock } = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
    const memory = new MemoryStore({ sweepIntervalMs: 0, now: clock.now, minTtlMs: SIMULATION_TTL_MS });
    const t = 1_700_000_000_000.25;
    for (const [i, leaseId] of ['a', 'b'].entries()) {
      const charged = checks.map((c) => ({
        ...c,
        cost: c.spec.algorithm === 'concurrency' ? 1 : 3,
        leaseId,
      }));
      // per-client limits in one call, the global one in another (two hash tags)
      for (const group of [charged.slice(0, 3), charged.slice(3)]) {
        await clock.at(t + i, () => memory.acquire(group));
        await clock.at(t + i, () => simulated.acquire(group));
      }
    }
    const at = t + 500;
    const fromRedis = await peekRedis(redis.store.client, redis.prefix, checks, at);
    const fromMemory = peekOutcomes(
      checks,
      memory.peekStates(
        checks.map((c) => c.key),
        at,
      ).states,
      at,
    );
    expect(fromRedis).toEqual(fromMemory);
    expect(fromRedis.map((outcome, i) => usageOf(checks[i]!.spec, outcome))).toMatchObject([
      { remaining: 4, inFlight: 0 },
      { remaining: 4, inFlight: 0 },
      { remaining: 1, inFlight: 2 },
      { remaining: 4, inFlight: 0 },
    ]);
    await memory.close();
  });

  it("reads another algorithm's state under a key as nothing stored", async () => {
    const slots: ConcurrencySpec = { algorithm: 'concurrency', max: 2, leaseMs: 10_000 };
    const key = limitKey('', 'peek-other', limitKeyName(slots, 'x'), 'global');
    await redis.admin.set(redis.prefix + key, '1 2');
    const [outcome] = await peekRedis(redis.store.client, redis.prefix, [{ key, spec: slots, cost: 1 }]);
    expect(usageOf(slots, outcome!)).toEqual({ remaining: 2, debt: 0, inFlight: 0, fullInSeconds: 0 });
  });
});
