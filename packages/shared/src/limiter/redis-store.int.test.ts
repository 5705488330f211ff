/**
 * RedisStore against a real Redis (127.0.0.1:6379), plus a Redis of this file's own (spawned on a
 * free port) for the tests that pause or kill it. Every key lives under this file's own prefix.
 */
import type { ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACQUIRE_FUNCTION, ACQUIRE_LIBRARY_NAME, ACQUIRE_LUA } from './acquire-script.js';
import type { BucketLimits } from './algorithms/token-bucket/model.js';
import { type LimitCheck, limitKey } from './limits.js';
import { RedisStore } from './redis-store.js';
import { StoreError } from './store.js';
import { freePort, startOwnRedis } from './test-redis.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const PREFIX = `test:limiter-redis:${randomUUID()}:`;
const spec: BucketLimits = { capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 10 };

let store: RedisStore;
let admin: Redis;

/** One token-bucket check (a v1 rule's request). */
const request = (client: string, limits: BucketLimits, cost: number): LimitCheck[] => [
  { key: limitKey('', 'rule-1', '', client), spec: { algorithm: 'token-bucket', ...limits }, cost },
];
const keyOf = (checks: LimitCheck[]) => checks[0]!.key;
/** The one outcome of a one-check decision. */
const only = async (decision: Promise<{ limits: readonly unknown[] }>) => (await decision).limits[0];

async function expectStoreError(promise: Promise<unknown>, code: StoreError['code']): Promise<void> {
  // a hang fails the test here rather than at the test timeout
  const hang = sleep(2_000).then(() => 'still pending after 2 s');
  const outcome = await Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => error,
    ),
    hang,
  ]);
  expect(outcome).toBeInstanceOf(StoreError);
  expect((outcome as StoreError).code).toBe(code);
}

beforeAll(async () => {
  store = new RedisStore(REDIS_URL, { keyPrefix: PREFIX, commandTimeoutMs: 5_000 });
  admin = new Redis(REDIS_URL);
  await store.ready();
});

afterAll(async () => {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${PREFIX}*`, 'COUNT', 1_000);
    if (keys.length) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  await store.close();
  await admin.quit();
});

describe('RedisStore on the Redis clock', () => {
  it('uses Redis TIME: the balance refills between two calls, and the bucket is stamped with Redis time', async () => {
    const limits: BucketLimits = { capacity: 100, refill: 100, periodMs: 1_000, maxDebt: 0 };
    const req = request('redis-time', limits, 50);
    expect(await only(store.acquire(req))).toMatchObject({ allowed: true, level: 50 });
    await sleep(60);
    const second = (await store.acquire(request('redis-time', limits, 1))).limits[0]!;
    expect(second.allowed).toBe(true);
    expect(second.level).toBeGreaterThanOrEqual(50); // gained at least a token in 60 ms at 0.1/ms
    expect(second.level).toBeLessThan(99);

    const [seconds, micros] = await admin.time();
    const redisNowMs = Number(seconds) * 1_000 + Number(micros) / 1_000;
    const stored = (await admin.get(PREFIX + keyOf(req)))!;
    const updatedAtMs = Number(stored.split(' ')[1]);
    expect(Math.abs(redisNowMs - updatedAtMs)).toBeLessThan(5_000);
  });

  it('lets the key expire once the bucket is full again; the next request finds a full bucket', async () => {
    const limits: BucketLimits = { capacity: 2, refill: 2, periodMs: 100, maxDebt: 0 };
    const req = request('expires', limits, 2);
    const first = (await store.acquire(req)).limits[0]!;
    expect(first).toMatchObject({ allowed: true, level: 0 });
    expect(first.resetMs).toBeLessThanOrEqual(100);
    expect(await admin.pttl(PREFIX + keyOf(req))).toBeLessThanOrEqual(100);
    await sleep(first.resetMs + 50);
    expect(await admin.exists(PREFIX + keyOf(req))).toBe(0);
    expect(await only(store.acquire(req))).toMatchObject({ allowed: true, level: 0 });
  });

  it("gives each key written in one batch its own decision's reset as time to live", async () => {
    // one turn: four buckets whose resets differ by seconds, a hot client's three requests (a
    // pending state, written once at the batch's end), and a request of two limits
    const periods = [10_000, 20_000, 30_000, 40_000];
    const lone = periods.map((periodMs, i) =>
      request(`ttl-${i}`, { capacity: 10, refill: 10, periodMs, maxDebt: 0 }, 3),
    );
    const hot = request('ttl-hot', { capacity: 10, refill: 10, periodMs: 50_000, maxDebt: 0 }, 1);
    const pair: LimitCheck[] = [
      ...request('ttl-pair', { capacity: 10, refill: 10, periodMs: 60_000, maxDebt: 0 }, 2),
      {
        key: limitKey('', 'rule-1', 'second', 'ttl-pair'),
        spec: { algorithm: 'token-bucket', capacity: 10, refill: 10, periodMs: 70_000, maxDebt: 0 },
        cost: 4,
      },
    ];
    const before = store.scriptCalls;
    const decisions = await Promise.all([
      ...lone.map((req) => store.acquire(req)),
      ...[1, 2, 3].map(() => store.acquire(hot)),
      store.acquire(pair),
    ]);
    expect(store.scriptCalls - before).toBe(1);
    const written = [
      ...lone.map((req, i) => ({ key: keyOf(req), resetMs: decisions[i]!.limits[0]!.resetMs })),
      { key: keyOf(hot), resetMs: decisions[6]!.limits[0]!.resetMs },
      { key: pair[0]!.key, resetMs: decisions[7]!.limits[0]!.resetMs },
      { key: pair[1]!.key, resetMs: decisions[7]!.limits[1]!.resetMs },
    ];
    // 3 of 10 tokens back at 10 per period: 3, 6, 9 and 12 s; the hot client's 3 of 50 s: 15 s
    expect(written.map(({ resetMs }) => resetMs)).toEqual([
      3_000, 6_000, 9_000, 12_000, 15_000, 12_000, 28_000,
    ]);
    for (const { key, resetMs } of written) {
      const ttl = await admin.pttl(PREFIX + key);
      expect(ttl, key).toBeLessThanOrEqual(resetMs);
      expect(ttl, key).toBeGreaterThan(resetMs - 1_000);
    }
  });

  it('calls its Redis Function: loaded once, then one FCALL per request, whatever its number of limits', async () => {
    const fresh = new RedisStore(REDIS_URL, { keyPrefix: PREFIX, commandTimeoutMs: 5_000 });
    const monitor = await admin.monitor();
    const calls: string[] = [];
    const key = request('fcall', spec, 1);
    const stacked: LimitCheck[] = [
      ...key,
      {
        key: limitKey('', 'rule-1', 'daily', 'fcall'),
        spec: { algorithm: 'sliding-window', max: 100, windowMs: 60_000 },
        cost: 1,
      },
    ];
    monitor.on('monitor', (_time: string, args: string[]) => {
      const command = String(args[0]).toLowerCase();
      if (/^(fcall|eval|evalsha)$/.test(command) && args.includes(PREFIX + keyOf(key))) calls.push(command);
    });
    try {
      await fresh.ready();
      expect(fresh.scriptMode).toBe('function');
      const listed = JSON.stringify(
        await admin.call('FUNCTION', 'LIST', 'LIBRARYNAME', ACQUIRE_LIBRARY_NAME),
      );
      expect(listed).toContain(ACQUIRE_FUNCTION);
      expect(await only(fresh.acquire(key))).toMatchObject({ allowed: true, level: 9 });
      expect((await fresh.acquire(stacked)).limits).toHaveLength(2);
      for (let i = 0; i < 40 && calls.length < 2; i++) await sleep(25);
      expect(calls).toEqual(['fcall', 'fcall']);
    } finally {
      monitor.disconnect();
      await fresh.close();
    }
  });

  it('decides each of many limits by its own numbers, call after call (the library keeps the limits it read)', async () => {
    // more limits than the library keeps (MAX_SPECS_KEPT, 64), twice over: kept ones are reused, the
    // rest read again, and none is taken for another
    for (let round = 0; round < 2; round++) {
      const decisions = await Promise.all(
        Array.from({ length: 150 }, (_, i) =>
          only(store.acquire(request(`many-${round}-${i}`, { ...spec, capacity: 10 + i }, 1))),
        ),
      );
      expect(decisions.map((d) => (d as { level: number }).level)).toEqual(
        Array.from({ length: 150 }, (_, i) => 9 + i),
      );
    }
  });

  it('calls by EVALSHA where FUNCTION is not allowed (an ACL user without it)', async () => {
    const user = `sluice-test-${randomUUID()}`;
    await admin.call('ACL', 'SETUSER', user, 'on', '>secret', '~*', '&*', '+@all', '-function');
    const limited = new RedisStore(`redis://${user}:secret@127.0.0.1:6379`, {
      keyPrefix: PREFIX,
      commandTimeoutMs: 5_000,
    });
    try {
      await limited.ready();
      expect(limited.scriptMode).toBe('eval');
      expect(await only(limited.acquire(request('acl', spec, 1)))).toMatchObject({ allowed: true, level: 9 });
    } finally {
      await limited.close();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('an ACL user allowed only what docs/configuration.md lists decides every kind of request', async () => {
    const user = `sluice-test-${randomUUID()}`;
    // docs/configuration.md, "What the gateway loads into Redis": @scripting and the commands its scripts run
    const scriptCommands = ['TIME', 'GET', 'SET', 'DEL', 'PEXPIRE', 'PTTL', 'ZADD', 'ZREM', 'ZCOUNT'];
    const more = ['ZSCORE', 'ZMSCORE', 'ZREMRANGEBYSCORE'];
    // what the client itself sends as it connects (INFO: ioredis's ready check)
    const connecting = ['INFO'];
    const allowed = [...scriptCommands, ...more, ...connecting].map((name) => `+${name.toLowerCase()}`);
    await admin.call('ACL', 'SETUSER', user, 'on', '>secret', '~*', '&*', '-@all', '+@scripting', ...allowed);
    const limited = new RedisStore(`redis://${user}:secret@127.0.0.1:6379`, {
      keyPrefix: PREFIX,
      commandTimeoutMs: 5_000,
    });
    try {
      await limited.ready();
      expect(limited.scriptMode).toBe('function');
      const window = { algorithm: 'sliding-window', max: 2, windowMs: 60_000 } as const;
      const slots = { algorithm: 'concurrency', max: 3, leaseMs: 60_000 } as const;
      const bucket = { algorithm: 'token-bucket', ...spec } as const;
      const slotKey = limitKey('', 'acl-docs', 'inflight:slots', 'c');
      // a bucket and a window, taken and denied; takes in a row (one full) and give-backs in a row
      const decisions = await Promise.all([
        limited.acquire([
          { key: limitKey('', 'acl-docs', 'b', 'c'), spec: bucket, cost: 1 },
          { key: limitKey('', 'acl-docs', 'w', 'c'), spec: window, cost: 1 },
        ]),
        ...Array.from({ length: 4 }, (_, i) =>
          limited.acquire([{ key: slotKey, spec: slots, cost: 1, leaseId: `acl-${i}` }]),
        ),
      ]);
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, false]);
      const atMs = decisions[1]!.atMs!;
      const settled = await Promise.all([
        limited.settle([
          {
            key: limitKey('', 'acl-docs', 'b', 'c'),
            spec: bucket,
            delta: -1,
            admittedAtMs: atMs,
            refundMax: 5,
          },
        ]),
        limited.settle([
          { key: slotKey, spec: slots, delta: 0, admittedAtMs: atMs, leaseId: 'acl-0', renew: true },
        ]),
        ...[0, 1, 2].map((i) =>
          limited.settle([{ key: slotKey, spec: slots, delta: 0, admittedAtMs: atMs, leaseId: `acl-${i}` }]),
        ),
      ]);
      expect(settled).toHaveLength(5);
      expect(await admin.exists(`${PREFIX}${slotKey}`)).toBe(0);
    } finally {
      await limited.close();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('functions: false (as on Redis 5 and 6): sends EVAL once per connection, then EVALSHA, and recovers from SCRIPT FLUSH by itself', async () => {
    const fresh = new RedisStore(REDIS_URL, { keyPrefix: PREFIX, commandTimeoutMs: 5_000, functions: false });
    const monitor = await admin.monitor();
    const seen: string[] = [];
    const key = request('evalsha', spec, 1);
    // a request with three limits is still one EVALSHA
    const stacked: LimitCheck[] = [
      ...key,
      {
        key: limitKey('', 'rule-1', 'daily', 'evalsha'),
        spec: { algorithm: 'sliding-window', max: 100, windowMs: 60_000 },
        cost: 1,
      },
      {
        key: limitKey('', 'rule-1', 'everyone', 'global'),
        spec: { algorithm: 'token-bucket', ...spec },
        cost: 1,
      },
    ];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[3] === PREFIX + keyOf(key)) seen.push(String(args[0]).toLowerCase());
    });
    try {
      await fresh.ready();
      await fresh.acquire(key);
      expect((await fresh.acquire(stacked)).limits).toHaveLength(3);
      await admin.script('FLUSH');
      expect((await fresh.acquire(key)).allowed).toBe(true); // NOSCRIPT, then EVAL, invisibly
      await fresh.acquire(key);
      for (let i = 0; i < 40 && seen.length < 5; i++) await sleep(25);
      expect(seen).toEqual(['eval', 'evalsha', 'evalsha', 'eval', 'evalsha']);
      const sha = createHash('sha1').update(ACQUIRE_LUA).digest('hex');
      expect(await admin.script('EXISTS', sha)).toEqual([1]);
    } finally {
      monitor.disconnect();
      await fresh.close();
    }
  });

  it('coalesceWrites without batching: the decisions of one turn leave in one socket write, each its own EVALSHA and answer', async () => {
    const limits: BucketLimits = { capacity: 5, refill: 1, periodMs: 60_000, maxDebt: 0 };
    /** socket-level writes while 8 decisions are asked in one turn */
    const writesFor = async (coalesceWrites: boolean, client: string) => {
      const fresh = new RedisStore(REDIS_URL, {
        keyPrefix: PREFIX,
        commandTimeoutMs: 5_000,
        coalesceWrites,
        batching: false, // batched, the 8 would be one call anyway
      });
      try {
        await fresh.ready();
        await fresh.acquire(request(`${client}-warm`, limits, 1)); // the script is loaded (EVAL) once
        const stream = (fresh.client as Redis).stream as unknown as Record<
          '_write' | '_writev',
          (...a: unknown[]) => void
        >;
        let writes = 0;
        for (const name of ['_write', '_writev'] as const) {
          const original = stream[name]!;
          stream[name] = function (this: unknown, ...args: unknown[]) {
            writes++;
            return original.apply(this, args);
          };
        }
        const decisions = await Promise.all(
          Array.from({ length: 8 }, () => fresh.acquire(request(client, limits, 1))),
        );
        expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
        expect(decisions.slice(0, 5).map((d) => d.limits[0]!.remaining)).toEqual([4, 3, 2, 1, 0]);
        return writes;
      } finally {
        await fresh.close();
      }
    };
    expect(await writesFor(true, 'coalesced')).toBe(1);
    expect(await writesFor(false, 'one-by-one')).toBeGreaterThan(1);
  });

  it("keeps a given client's own keyPrefix, by FCALL as by EVALSHA: both decide on the same key", async () => {
    const client = new Redis(REDIS_URL, { keyPrefix: 'client-prefix:' });
    const byFunction = new RedisStore(client, { keyPrefix: PREFIX });
    const byScript = new RedisStore(client, { keyPrefix: PREFIX, functions: false });
    try {
      await Promise.all([byFunction.ready(), byScript.ready()]);
      expect(byFunction.scriptMode).toBe('function');
      const req = request('client-prefix', spec, 3);
      expect((await byFunction.acquire(req)).limits[0]!.level).toBe(7);
      expect((await byScript.acquire(req)).limits[0]!.level).toBeLessThan(5);
      expect(await admin.exists(`client-prefix:${PREFIX}${keyOf(req)}`)).toBe(1);
      expect(await admin.exists(PREFIX + keyOf(req))).toBe(0);
    } finally {
      await byFunction.close();
      await byScript.close();
      await admin.del(`client-prefix:${PREFIX}${keyOf(request('client-prefix', spec, 3))}`);
      await client.quit();
    }
  });

  it('registers the script once on a client it is given, and leaves that client open on close', async () => {
    const client = new Redis(REDIS_URL);
    const defineCommand = client.defineCommand.bind(client);
    let defined = 0;
    client.defineCommand = (...args: Parameters<Redis['defineCommand']>) => {
      defined++;
      defineCommand(...args);
    };
    const a = new RedisStore(client, { keyPrefix: PREFIX });
    const b = new RedisStore(client, { keyPrefix: PREFIX });
    expect(defined).toBe(1);
    expect((await a.acquire(request('shared-client', spec, 1))).limits[0]!.level).toBe(9);
    expect((await b.acquire(request('shared-client', spec, 1))).limits[0]!.level).toBeLessThan(9);
    await a.close();
    await b.close();
    expect(client.status).toBe('ready');
    await expectStoreError(a.acquire(request('shared-client', spec, 1)), 'STORE_UNAVAILABLE');
    await client.quit();
  });

  it('rejects with STORE_ERROR when Redis answers with an error', async () => {
    const req = request('wrong-type', spec, 1);
    await admin.hset(PREFIX + keyOf(req), 'not', 'a bucket');
    await expectStoreError(store.acquire(req), 'STORE_ERROR');
  });
});

describe('RedisStore when Redis is away', () => {
  it('rejects at once with STORE_UNAVAILABLE when nothing listens (no offline queue)', async () => {
    const dead = new RedisStore('redis://127.0.0.1:1', { commandTimeoutMs: 200 });
    try {
      await expectStoreError(dead.acquire(request('dead', spec, 1)), 'STORE_UNAVAILABLE');
      await expectStoreError(dead.ready(300), 'STORE_UNAVAILABLE');
    } finally {
      await dead.close();
    }
  });

  describe('with a Redis of its own', () => {
    let server: ChildProcess | undefined;
    let port = 0;

    const startRedis = async (...options: string[]) => {
      server = await startOwnRedis(port, ...options);
    };
    const stopRedis = async () => {
      const child = server;
      server = undefined;
      if (!child || child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    };

    beforeAll(async () => {
      port = await freePort();
      await startRedis();
    });
    afterAll(stopRedis);

    it('times out with STORE_TIMEOUT when Redis does not answer in time', async () => {
      const own = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 100 });
      const control = new Redis({ port });
      try {
        await own.ready();
        expect((await own.acquire(request('paused', spec, 1))).allowed).toBe(true);
        await control.client('PAUSE', 500, 'ALL');
        await expectStoreError(own.acquire(request('paused', spec, 1)), 'STORE_TIMEOUT');
      } finally {
        await sleep(500);
        control.disconnect();
        await own.close();
      }
    });

    it('fails fast while Redis is down and goes back to it by itself when it returns', async () => {
      const own = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 500 });
      try {
        await own.ready();
        expect(await only(own.acquire(request('restart', spec, 4)))).toMatchObject({
          allowed: true,
          level: 6,
        });
        await stopRedis();
        await expectStoreError(own.acquire(request('restart', spec, 1)), 'STORE_UNAVAILABLE');
        await startRedis();
        await own.ready(5_000);
        // a new server: no function, no script cached (EVALSHA would be NOSCRIPT) and no bucket kept
        expect(await only(own.acquire(request('restart', spec, 4)))).toMatchObject({
          allowed: true,
          level: 6,
        });
        await own.ready();
        expect(own.scriptMode).toBe('function'); // loaded again on the new server
        expect(await only(own.acquire(request('restart', spec, 4)))).toMatchObject({ allowed: true });
      } finally {
        await own.close();
      }
    });

    it('a Redis that lost the function (FUNCTION FLUSH): that call by the script, invisibly, then the library again', async () => {
      const own = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 500 });
      const control = new Redis({ port });
      const monitor = await control.duplicate().monitor();
      const calls: string[] = [];
      monitor.on('monitor', (_time: string, args: string[]) => {
        const command = String(args[0]).toLowerCase();
        if (/^(fcall|eval|evalsha)$/.test(command)) calls.push(command);
      });
      try {
        await own.ready();
        expect(own.scriptMode).toBe('function');
        expect(await only(own.acquire(request('flushed', spec, 4)))).toMatchObject({
          allowed: true,
          level: 6,
        });
        expect(await control.call('FUNCTION', 'FLUSH')).toBe('OK');
        const second = await only(own.acquire(request('flushed', spec, 4)));
        expect(second).toMatchObject({ allowed: true });
        expect((second as { level: number }).level).toBeCloseTo(2, 1);
        await own.ready(); // the load the lost function started
        expect(own.scriptMode).toBe('function');
        expect(JSON.stringify(await control.call('FUNCTION', 'LIST'))).toContain(ACQUIRE_FUNCTION);
        expect((await own.acquire(request('flushed', spec, 1))).allowed).toBe(true);
        for (let i = 0; i < 40 && calls.length < 4; i++) await sleep(25);
        // the second acquire: its FCALL found nothing, then the script (EVAL: the first on this connection)
        expect(calls).toEqual(['fcall', 'fcall', 'eval', 'fcall']);
      } finally {
        monitor.disconnect();
        control.disconnect();
        await own.close();
      }
    });

    it('calls by EVALSHA on a Redis without FUNCTION (as Redis 5 and 6 are)', async () => {
      await stopRedis();
      await startRedis('--rename-command', 'FUNCTION', '');
      const own = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 500 });
      const control = new Redis({ port });
      try {
        await own.ready();
        expect(own.scriptMode).toBe('eval');
        expect(await only(own.acquire(request('no-functions', spec, 4)))).toMatchObject({
          allowed: true,
          level: 6,
        });
        expect(
          await control.call('SCRIPT', 'EXISTS', createHash('sha1').update(ACQUIRE_LUA).digest('hex')),
        ).toEqual([1]);
      } finally {
        control.disconnect();
        await own.close();
        await stopRedis();
      }
    });
  });
});
