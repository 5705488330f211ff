/**
 * The multi-limit script (acquire.lua) against the TypeScript engine, and the all-or-nothing rule in
 * both stores, over random stacked limits (token buckets and sliding windows mixed) on a simulated clock.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LimitCheck, limitKey, type StoreDecision } from './limits.js';
import { MemoryStore } from './memory-store.js';
import { type StackedScenario, stackedScenarioArb } from './test-arbitraries.js';
import { SimulatedClock } from './test-clock.js';
import { openTestRedis, type TestRedis } from './test-redis.js';
import { checksOf, runDifferential, SIMULATION_TTL_MS, sameDecision } from './test-reference.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('acquire');
});
afterAll(() => redis.close());

const burst = { algorithm: 'token-bucket', capacity: 2, refill: 1, periodMs: 1_000, maxDebt: 0 } as const;
const daily = { algorithm: 'sliding-window', max: 3, windowMs: 86_400_000 } as const;

/** A store's acquire at an instant of a simulated clock. */
type AcquireAt = (checks: readonly LimitCheck[], nowMs: number) => Promise<StoreDecision>;

describe('acquire.lua: several limits in one call', () => {
  it('admits only when every limit admits; a denial by one charges none of the others', async () => {
    const { store, clock } = redis.simulated();
    const checks = (client: string): LimitCheck[] => [
      { key: limitKey('', 'rule', 'burst', client), spec: burst, cost: 1 },
      { key: limitKey('', 'rule', 'daily', client), spec: daily, cost: 1 },
    ];
    const t0 = 1_700_000_000_000;
    expect((await clock.at(t0, () => store.acquire(checks('a')))).limits.map((l) => l.remaining)).toEqual([
      1, 2,
    ]);
    expect((await clock.at(t0, () => store.acquire(checks('a')))).limits.map((l) => l.remaining)).toEqual([
      0, 1,
    ]);
    // the burst denies: the daily window is not charged
    const denied = await clock.at(t0, () => store.acquire(checks('a')));
    expect(denied).toMatchObject({ allowed: false, deniedIndex: 0, retryAfterMs: 1_000 });
    expect(denied.limits.map((l) => [l.allowed, l.remaining])).toEqual([
      [false, 0],
      [true, 1],
    ]);
    // a second later the burst has a token; the daily window still has the one it had
    const third = await clock.at(t0 + 1_000, () => store.acquire(checks('a')));
    expect(third.allowed).toBe(true);
    expect(third.limits[1]!.remaining).toBe(0);
    // now the window denies, and the burst is not charged: both wait for the longest
    const byWindow = await clock.at(t0 + 2_000, () => store.acquire(checks('a')));
    expect(byWindow.deniedIndex).toBe(1);
    expect(byWindow.limits[0]).toMatchObject({ allowed: true, retryAfterMs: 0 });
    expect(byWindow.retryAfterMs).toBe(byWindow.limits[1]!.retryAfterMs);
    // the burst still has the token the window's denial did not take
    expect(
      (await clock.at(t0 + 2_000, () => store.acquire(checks('a').slice(0, 1)))).limits[0],
    ).toMatchObject({
      allowed: true,
      level: 0,
    });
  });

  it('gives the same answers as the TypeScript engine, bit for bit, over 10,000+ random stacked operations', async () => {
    const scenarios = stackedScenarioArb(420, 600, { backwards: true });
    const { operations, denials, checks } = await runDifferential(redis, scenarios, 25);
    expect(operations).toBeGreaterThanOrEqual(10_000);
    // stacked: 1.44–2.0 checks per operation over 25 scenarios in 300 samples of the arbitrary (seeds
    // are random: below 1.5 in about 1 run of 100, as CI met once; 1.3 is below every sample)
    expect(checks).toBeGreaterThan(operations * 1.3);
    expect(denials).toBeGreaterThan(1_000);
  });

  it('refuses an unknown operation, algorithm or a wrong number of arguments with an error reply', async () => {
    const { store } = redis;
    const client = store.client;
    const key = `${redis.prefix}{x:y}`;
    await expect(client.sluiceAcquire(1, key, 'release', '', '', '1')).rejects.toThrow(/unknown operation/);
    await expect(client.sluiceAcquire(1, key, 'acquire', '', '', '1', 'leaky', '1')).rejects.toThrow(
      /unknown algorithm/,
    );
    await expect(
      client.sluiceAcquire(1, key, 'acquire', '', '', '2', 'sliding-window', '1', '5', '1000', 'W5/1000'),
    ).rejects.toThrow(/number of checks/);
    await expect(
      client.sluiceAcquire(
        1,
        key,
        'acquire',
        '',
        '',
        '1',
        'sliding-window',
        '1',
        '5',
        '1000',
        'W5/1000',
        'x',
      ),
    ).rejects.toThrow(/unexpected arguments/);
    await expect(
      client.sluiceAcquire(1, key, 'acquire', '', '', '1', 'sliding-window', '0', '5', '1000', 'W5/1000'),
    ).rejects.toThrow(/bad cost/);
  });
});

/**
 * All or nothing, seen from outside: a denied request changes nothing, so a run of the same requests
 * WITHOUT the denied ones gives every remaining request exactly the same answer.
 */
async function deniedRequestsChangeNothing(acquireAt: AcquireAt, scenario: StackedScenario, run: string) {
  const times: number[] = [];
  let nowMs = scenario.startMs;
  for (const op of scenario.ops) {
    nowMs += op.stepMs;
    times.push(nowMs);
  }
  const full: StoreDecision[] = [];
  for (let i = 0; i < scenario.ops.length; i++)
    full.push(await acquireAt(checksOf(scenario, `${run}-full`, i), times[i]!));
  let denied = 0;
  for (let i = 0; i < scenario.ops.length; i++) {
    if (!full[i]!.allowed) {
      denied++;
      continue;
    }
    const again = await acquireAt(checksOf(scenario, `${run}-admitted-only`, i), times[i]!);
    if (!sameDecision(again, full[i]!)) expect({ op: i, again }).toEqual({ op: i, again: full[i] });
  }
  return denied;
}

describe('all or nothing: a denied request never changes any balance or count', () => {
  const scenarios = stackedScenarioArb(20, 80);

  it('in the in-process store', async () => {
    const clock = new SimulatedClock();
    const store = new MemoryStore({ sweepIntervalMs: 0, now: clock.now });
    let run = 0;
    let denied = 0;
    await fc.assert(
      fc.asyncProperty(scenarios, async (scenario) => {
        const acquireAt: AcquireAt = (c, t) => clock.at(t, () => store.acquire(c));
        denied += await deniedRequestsChangeNothing(acquireAt, scenario, `m${++run}`);
      }),
      { numRuns: 300 },
    );
    expect(denied).toBeGreaterThan(1_000);
    await store.close();
  });

  it('in Redis, where a denied request also leaves every stored value as it was', async () => {
    const { admin, prefix } = redis;
    const { store, clock } = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
    let run = 0;
    let denied = 0;
    const acquireAt: AcquireAt = async (checks, nowMs) => {
      const keys = checks.map((c) => prefix + c.key);
      const before = await admin.mget(...keys);
      const decision = await clock.at(nowMs, () => store.acquire(checks));
      if (!decision.allowed) expect(await admin.mget(...keys)).toEqual(before);
      return decision;
    };
    await fc.assert(
      fc.asyncProperty(scenarios, async (scenario) => {
        denied += await deniedRequestsChangeNothing(acquireAt, scenario, `r${++run}`);
      }),
      { numRuns: 40 },
    );
    expect(denied).toBeGreaterThan(200);
  });
});
