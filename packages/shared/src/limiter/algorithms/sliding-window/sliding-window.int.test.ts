/**
 * sliding-window.lua against model.ts in the real Redis (127.0.0.1:6379), on a simulated clock,
 * through the store's one script (acquire.lua) with one check per request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limitKey, type SlidingWindowSpec } from '../../limits.js';
import { stackedScenarioArb, windowSpecArb } from '../../test-arbitraries.js';
import { openTestRedis, type TestRedis } from '../../test-redis.js';
import { runDifferential } from '../../test-reference.js';

const window = (max: number, windowMs: number): SlidingWindowSpec => ({
  algorithm: 'sliding-window',
  max,
  windowMs,
});
const check = (client: string, spec: SlidingWindowSpec, cost: number) => [
  { key: limitKey('', 'rule-1', 'daily', client), spec, cost },
];

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('sliding-window');
});
afterAll(() => redis.close());

describe('sliding-window.lua', () => {
  it('10 per minute: the burst, then the wait for the previous window to weigh 9', async () => {
    const { store, clock } = redis.simulated();
    const req = check('minute', window(10, 60_000), 1);
    for (let i = 0; i < 10; i++) expect((await clock.at(0, () => store.acquire(req))).allowed).toBe(true);
    expect(await clock.at(0, () => store.acquire(req))).toMatchObject({
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: 66_000,
      limits: [{ allowed: false, level: 10, remaining: 0, retryAfterMs: 66_000, resetMs: 120_000 }],
    });
    expect((await clock.at(65_999, () => store.acquire(req))).allowed).toBe(false);
    expect((await clock.at(66_000, () => store.acquire(req))).limits[0]).toMatchObject({
      allowed: true,
      level: 10,
    });
  });

  it('stores "<windowIndex> <current> <previous> <tag>" for as long as the estimate is above 0 (at most two windows)', async () => {
    const { store, admin, prefix } = redis;
    const req = check('ttl', window(5, 10_000), 2);
    const [seconds] = await admin.time();
    const nowMs = Number(seconds) * 1_000; // a whole second: 0 ms into a 10 s window only if aligned
    const decision = await store.acquire(req);
    expect(decision.limits[0]).toMatchObject({ allowed: true, level: 2, remaining: 3 });
    const resetMs = decision.limits[0]!.resetMs;
    expect(resetMs).toBeGreaterThan(10_000);
    expect(resetMs).toBeLessThanOrEqual(20_000);
    const ttl = await admin.pttl(prefix + req[0]!.key);
    expect(ttl).toBeGreaterThan(resetMs - 1_000);
    expect(ttl).toBeLessThanOrEqual(resetMs);
    const [index, current, previous, tag] = (await admin.get(prefix + req[0]!.key))!.split(' ');
    expect(Math.abs(Number(index) - Math.floor(nowMs / 10_000))).toBeLessThanOrEqual(1);
    expect([Number(current), Number(previous)]).toEqual([2, 0]);
    expect(tag).toBe('W5/10000'); // the numbers it was written under

    // denied (more than max): nothing written
    const never = check('never', window(5, 10_000), 6);
    expect((await store.acquire(never)).limits[0]).toMatchObject({
      allowed: false,
      retryAfterMs: 0,
      resetMs: 0,
    });
    expect(await admin.exists(prefix + never[0]!.key)).toBe(0);
  });

  it('gives the same answers as model.ts, bit for bit, over 10,000+ random operations', async () => {
    const scenarios = stackedScenarioArb(420, 600, { backwards: true, spec: windowSpecArb, maxStack: 1 });
    const { operations, denials } = await runDifferential(redis, scenarios, 25);
    expect(operations).toBeGreaterThanOrEqual(10_000);
    expect(denials).toBeGreaterThan(1_000);
  });
});
