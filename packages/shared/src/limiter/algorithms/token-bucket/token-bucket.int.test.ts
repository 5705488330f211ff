/**
 * token-bucket.lua against model.ts in the real Redis (127.0.0.1:6379), on a simulated clock, through
 * the store's one script (acquire.lua) with one check per request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limitKey, type TokenBucketSpec } from '../../limits.js';
import { bucketSpecArb, stackedScenarioArb } from '../../test-arbitraries.js';
import { openTestRedis, type TestRedis } from '../../test-redis.js';
import { runDifferential } from '../../test-reference.js';
import { MAX_WAIT_MS } from '../wait.js';

const spec = (numbers: Omit<TokenBucketSpec, 'algorithm'>): TokenBucketSpec => ({
  algorithm: 'token-bucket',
  ...numbers,
});
const example = spec({ capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 10 });
const check = (client: string, s: TokenBucketSpec, cost: number) => [
  { key: limitKey('', 'rule-1', '', client), spec: s, cost },
];

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('token-bucket');
});
afterAll(() => redis.close());

describe('token-bucket.lua', () => {
  it('follows the documented debt example (docs/limits.md): admitted (2), admitted (−6), denied with Retry-After 7 s', async () => {
    const { store, clock } = redis.simulated();
    const req = check('spec-example', example, 8);
    expect((await clock.at(1_000, () => store.acquire(req))).limits[0]).toEqual({
      allowed: true,
      level: 2,
      remaining: 2,
      retryAfterMs: 0,
      resetMs: 8_000,
    });
    expect((await clock.at(1_000, () => store.acquire(req))).limits[0]).toMatchObject({
      allowed: true,
      level: -6,
      resetMs: 16_000,
    });
    expect(await clock.at(1_000, () => store.acquire(req))).toMatchObject({
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: 7_000,
      limits: [{ allowed: false, level: -6, remaining: 0, retryAfterMs: 7_000, resetMs: 16_000 }],
    });
    expect((await clock.at(7_999, () => store.acquire(req))).allowed).toBe(false);
    expect((await clock.at(8_000, () => store.acquire(req))).limits[0]).toMatchObject({
      allowed: true,
      level: -7,
    });
  });

  it('gives the key a time to live of resetMs, and keeps no key for a full bucket', async () => {
    const { admin, prefix } = redis;
    const { store, clock } = redis.simulated();
    const req = check('ttl', example, 4);
    expect((await clock.at(5_000, () => store.acquire(req))).limits[0]!.resetMs).toBe(4_000);
    const ttl = await admin.pttl(prefix + req[0]!.key);
    expect(ttl).toBeGreaterThan(3_000);
    expect(ttl).toBeLessThanOrEqual(4_000);

    // denied (cost can never fit) on a new bucket: nothing written
    const never = check('never', example, 25);
    expect((await clock.at(5_000, () => store.acquire(never))).limits[0]).toMatchObject({
      allowed: false,
      level: 10,
      resetMs: 0,
    });
    expect(await admin.exists(prefix + never[0]!.key)).toBe(0);

    // admitted but still full (cost below the balance's precision): the key is deleted
    const huge = check('still-full', spec({ capacity: 1e12, refill: 1, periodMs: 1, maxDebt: 0 }), 1e-6);
    expect((await clock.at(5_000, () => store.acquire(huge))).limits[0]).toMatchObject({
      allowed: true,
      level: 1e12,
      resetMs: 0,
    });
    expect(await admin.exists(prefix + huge[0]!.key)).toBe(0);
  });

  it('keeps a bucket whose refill takes longer than MAX_WAIT_MS without expiry', async () => {
    const { admin, prefix } = redis;
    const { store, clock } = redis.simulated();
    const glacial = check(
      'glacial',
      spec({ capacity: 1e9, refill: 1e-3, periodMs: 60_000, maxDebt: 0 }),
      1e9 - 1,
    );
    expect((await clock.at(1_000, () => store.acquire(glacial))).limits[0]).toMatchObject({
      allowed: true,
      resetMs: MAX_WAIT_MS,
    });
    expect(await admin.pttl(prefix + glacial[0]!.key)).toBe(-1); // exists, no expiry
  });

  it('a 1-per-hour bucket just emptied is full in exactly 3,600,000 ms on Redis TIME too', async () => {
    const decision = await redis.store.acquire(
      check('hourly', spec({ capacity: 1, refill: 1, periodMs: 3_600_000, maxDebt: 1 }), 1),
    );
    expect(decision.limits[0]).toMatchObject({ allowed: true, level: 0, resetMs: 3_600_000 });
  });

  it('gives the same answers as model.ts, bit for bit, over 10,000+ random operations', async () => {
    const scenarios = stackedScenarioArb(420, 600, { backwards: true, spec: bucketSpecArb, maxStack: 1 });
    const { operations, denials } = await runDifferential(redis, scenarios, 25);
    expect(operations).toBeGreaterThanOrEqual(10_000);
    expect(denials).toBeGreaterThan(1_000);
  });
});
