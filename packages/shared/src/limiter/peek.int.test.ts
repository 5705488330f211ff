/**
 * peek (GET /usage) against what the next acquire sees: in both stores, after random traffic on a
 * simulated clock, reading a limit charges nothing and tells what the next request would be told.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LimitCheck, type LimitOutcome, limitKey } from './limits.js';
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
    expect(usageOf(spec, empty[0]!)).toEqual({ remaining: 10, debt: 0, fullInSeconds: 0 });
    await redis.store.acquire([{ ...checks[0]!, cost: 15 }]);
    const after = await peekRedis(redis.store.client, redis.prefix, checks);
    const usage = usageOf(spec, after[0]!);
    expect(usage.remaining).toBe(0);
    expect(usage.debt).toBeGreaterThan(4.9);
    expect(usage.debt).toBeLessThanOrEqual(5);
    expect(usage.fullInSeconds).toBe(15);
    expect(after[0]!.allowed).toBe(false);
  });
});
