/**
 * What the script does inside Redis per decision (issue 16: scripts that do only what the algorithm
 * needs), read from MONITOR on the real Redis, which lists the commands a script runs ("lua" lines): a
 * concurrency take and give-back is at most 4 commands and never TYPE; a token-bucket decision reads
 * and writes one key, and a batch of decisions on one key reads and writes it once.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConcurrencySpec, limitKey, type TokenBucketSpec } from './limits.js';
import { openTestRedis, REDIS_URL, type TestRedis } from './test-redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('script-commands');
});
afterAll(async () => {
  await redis?.close();
});

/** The commands scripts run on keys holding `marker` while `work` runs, whole: `[["ZCOUNT", key, …], …]`. */
async function scriptCommandLines(marker: string, work: () => Promise<unknown>): Promise<string[][]> {
  const monitor = await new Redis(REDIS_URL).monitor();
  const seen: string[][] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source.includes('lua') && args.some((arg) => arg.includes(marker))) {
      seen.push([args[0]!.toUpperCase(), ...args.slice(1)]);
    }
  });
  await work();
  await new Promise((resolve) => setTimeout(resolve, 200)); // the monitor's lines arrive after the replies
  monitor.disconnect();
  return seen;
}

/** The commands scripts run on keys holding `marker` while `work` runs: `["ZCOUNT", …]`. */
async function scriptCommands(marker: string, work: () => Promise<unknown>): Promise<string[]> {
  return (await scriptCommandLines(marker, work)).map((line) => line[0]!);
}

describe('Redis commands inside the script, per decision', () => {
  it('a concurrency take and give-back: at most 4 commands, no TYPE', async () => {
    const spec: ConcurrencySpec = { algorithm: 'concurrency', max: 3, leaseMs: 35_000 };
    const key = limitKey('', 'commands', 'inflight:slots', `slots-${Date.now()}`);
    const seen = await scriptCommands(key, async () => {
      // a first request on an empty key, then one beside a slot already held
      for (const leaseId of ['a', 'b']) await redis.store.acquire([{ key, spec, cost: 1, leaseId }]);
      await redis.store.settle([{ key, spec, delta: 0, admittedAtMs: 0, leaseId: 'b' }]);
      await redis.store.settle([{ key, spec, delta: 0, admittedAtMs: 0, leaseId: 'a' }]);
    });
    expect(seen).not.toContain('TYPE');
    expect(seen.length / 2).toBeLessThanOrEqual(4); // it was 12: ZCARD ×4, TYPE ×2, ZREMRANGEBYSCORE ×2, …
    expect(await redis.admin.exists(redis.prefix + key)).toBe(0); // every slot back: nothing left
  });

  it('a batch of takes on one key counts it once, pushes its expiry once and drops expired leases once; the takes in a row after the first are checked with one ZMSCORE and added with one ZADD', async () => {
    const spec: ConcurrencySpec = { algorithm: 'concurrency', max: 5, leaseMs: 35_000 };
    const key = limitKey('', 'commands', 'inflight:slots', `hot-slots-${Date.now()}`);
    const leaseIds = Array.from({ length: 8 }, (_, i) => `lease-${i}`);
    let taken: { allowed: boolean; level: number; atMs: number }[] = [];
    const takes = await scriptCommandLines(key, async () => {
      // asked in one event-loop turn: one batched script call
      taken = await Promise.all(
        leaseIds.map((leaseId) =>
          redis.store
            .acquire([{ key, spec, cost: 1, leaseId }])
            .then((d) => ({ allowed: d.allowed, level: d.limits[0]!.level, atMs: d.atMs! })),
        ),
      );
    });
    // the first take on its own; the 7 after it: their ids checked new at once, the 4 that fit added
    // at once, and for the three denials the expired leases dropped once
    expect(takes.map((line) => line[0])).toEqual([
      'ZCOUNT',
      'ZADD',
      'PEXPIRE',
      'ZMSCORE',
      'ZADD',
      'ZREMRANGEBYSCORE',
    ]);
    expect(takes[3]!.slice(2)).toEqual(leaseIds.slice(1));
    expect(takes[4]!.slice(2).filter((_, i) => i % 2 === 1)).toEqual(leaseIds.slice(1, 5));
    expect(taken.map((t) => t.allowed)).toEqual([true, true, true, true, true, false, false, false]);
    expect(taken.map((t) => t.level)).toEqual([1, 2, 3, 4, 5, 5, 5, 5]);
    expect(await redis.admin.pttl(redis.prefix + key)).toBeGreaterThan(30_000);

    // two given back and two taken in one batch: the count follows the give-backs (no second ZCOUNT)
    let retaken: boolean[] = [];
    const mixed = await scriptCommands(key, async () => {
      const release = (i: number) =>
        redis.store.settle([{ key, spec, delta: 0, admittedAtMs: taken[i]!.atMs, leaseId: leaseIds[i]! }]);
      const take = (leaseId: string) =>
        redis.store.acquire([{ key, spec, cost: 1, leaseId }]).then((d) => d.allowed);
      const [, , a, b, c] = await Promise.all([release(0), release(1), take('x'), take('y'), take('z')]);
      retaken = [a, b, c];
    });
    // (the give-backs: the second rides on the first, one ZREM each; the takes: the 2 after the first
    // checked at once, one added)
    expect(mixed).toEqual([
      'ZREM',
      'ZREM',
      'ZCOUNT',
      'ZADD',
      'PEXPIRE',
      'ZMSCORE',
      'ZADD',
      'ZREMRANGEBYSCORE',
    ]);
    expect(retaken).toEqual([true, true, false]);
    expect(await redis.admin.zcard(redis.prefix + key)).toBe(5);
  });

  it('give-backs in a row of slots taken by one call: the first a ZREM of its own, the rest one ZREM of all their leases', async () => {
    const spec: ConcurrencySpec = { algorithm: 'concurrency', max: 10, leaseMs: 35_000 };
    const key = limitKey('', 'commands', 'inflight:slots', `burst-${Date.now()}`);
    const leaseIds = Array.from({ length: 6 }, (_, i) => `burst-${i}`);
    // taken in one batch: one admission clock
    const taken = await Promise.all(
      leaseIds.map((leaseId) => redis.store.acquire([{ key, spec, cost: 1, leaseId }])),
    );
    expect(new Set(taken.map((d) => d.atMs)).size).toBe(1);
    let settled: unknown[] = [];
    const lines = await scriptCommandLines(key, async () => {
      settled = await Promise.all(
        leaseIds.map((leaseId, i) =>
          redis.store.settle([{ key, spec, delta: 0, admittedAtMs: taken[i]!.atMs!, leaseId }]),
        ),
      );
    });
    const fullKey = redis.prefix + key;
    expect(lines).toEqual([
      ['ZREM', fullKey, 'burst-0'],
      ['ZREM', fullKey, 'burst-1', 'burst-2', 'burst-3', 'burst-4', 'burst-5'],
    ]);
    // each give-back is answered as alone: its slot back (a give-back's level is not counted: 0)
    expect(settled).toEqual(leaseIds.map(() => [{ level: 0, remaining: 10, resetMs: 0 }]));
    expect(await redis.admin.exists(fullKey)).toBe(0);
  });

  it('a token-bucket decision: GET and SET of its one key', async () => {
    const spec: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 5,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 0,
    };
    const key = limitKey('', 'commands', 'bucket', `bucket-${Date.now()}`);
    const seen = await scriptCommands(key, () => redis.store.acquire([{ key, spec, cost: 1 }]));
    expect(seen).toEqual(['GET', 'SET']);
  });

  it('a batch of decisions on one key: one GET and one SET, each request decided in turn', async () => {
    const spec: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 5,
      refill: 1,
      periodMs: 3_600_000,
      maxDebt: 0,
    };
    const key = limitKey('', 'commands', 'bucket', `batch-${Date.now()}`);
    let decisions: { allowed: boolean; remaining: number }[] = [];
    const seen = await scriptCommands(key, async () => {
      // asked in one event-loop turn: one batched script call (RedisStore batches by default)
      decisions = await Promise.all(
        Array.from({ length: 8 }, () =>
          redis.store
            .acquire([{ key, spec, cost: 1 }])
            .then((d) => ({ allowed: d.allowed, remaining: d.limits[0]!.remaining })),
        ),
      );
    });
    expect(seen).toEqual(['GET', 'SET']);
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
    expect(decisions.slice(0, 5).map((d) => Math.floor(d.remaining))).toEqual([4, 3, 2, 1, 0]);
    // what the last admitted request left is what Redis holds, and it expires when the bucket is full again
    const stored = await redis.admin.get(redis.prefix + key);
    expect(Number(stored?.split(' ')[0])).toBeCloseTo(0, 3);
    expect(await redis.admin.pttl(redis.prefix + key)).toBeGreaterThan(5 * 3_600_000 - 60_000);
  });
});
