/**
 * RedisStore against a real Redis (127.0.0.1:6379), plus a Redis of this file's own (spawned on a
 * free port) for the tests that pause or kill it. Every key lives under this file's own prefix.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BucketState, decide, MAX_WAIT_MS } from './bucket.js';
import { RedisStore, TOKEN_BUCKET_LUA } from './redis-store.js';
import { type BucketLimits, bucketKey, type Decision, type DecisionRequest, StoreError } from './store.js';
import { costArb, limitsArb, startMsArb, stepMsArb } from './test-arbitraries.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const PREFIX = `test:limiter-redis:${randomUUID()}:`;
/** keeps simulated-clock keys alive in real time while a test walks its own clock */
const SIMULATION_TTL_MS = 600_000;

const spec: BucketLimits = { capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 10 };

let store: RedisStore;
let admin: Redis;

const request = (client: string, limits: BucketLimits, cost: number): DecisionRequest => ({
  key: bucketKey('', 'rule-1', client),
  limits,
  cost,
});

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

describe('RedisStore on a simulated clock', () => {
  it('follows the SPEC §2 example: admitted (2), admitted (−6), denied with Retry-After 7 s', async () => {
    const req = request('spec-example', spec, 8);
    expect(await store.decideAt(req, 1_000)).toEqual({
      allowed: true,
      balance: 2,
      retryAfterMs: 0,
      fullInMs: 8_000,
    });
    expect(await store.decideAt(req, 1_000)).toEqual({
      allowed: true,
      balance: -6,
      retryAfterMs: 0,
      fullInMs: 16_000,
    });
    expect(await store.decideAt(req, 1_000)).toEqual({
      allowed: false,
      balance: -6,
      retryAfterMs: 7_000,
      fullInMs: 16_000,
    });
    expect((await store.decideAt(req, 7_999)).allowed).toBe(false);
    expect(await store.decideAt(req, 8_000)).toMatchObject({ allowed: true, balance: -7 });
  });

  it('gives the key a time to live of fullInMs, and keeps no key for a full bucket', async () => {
    const req = request('ttl', spec, 4);
    const first = await store.decideAt(req, 5_000);
    expect(first.fullInMs).toBe(4_000);
    const ttl = await admin.pttl(PREFIX + req.key);
    expect(ttl).toBeGreaterThan(3_000);
    expect(ttl).toBeLessThanOrEqual(4_000);

    // denied (cost can never fit) on a new bucket: nothing written
    const never = request('never', spec, 25);
    expect(await store.decideAt(never, 5_000)).toMatchObject({ allowed: false, balance: 10, fullInMs: 0 });
    expect(await admin.exists(PREFIX + never.key)).toBe(0);

    // admitted but still full (cost below the balance's precision): the key is deleted
    const huge = request('still-full', { capacity: 1e12, refill: 1, periodMs: 1, maxDebt: 0 }, 1e-6);
    expect(await store.decideAt(huge, 5_000)).toMatchObject({ allowed: true, balance: 1e12, fullInMs: 0 });
    expect(await admin.exists(PREFIX + huge.key)).toBe(0);
  });

  it('keeps a bucket whose refill takes longer than MAX_WAIT_MS without expiry', async () => {
    const glacial = request(
      'glacial',
      { capacity: 1e9, refill: 1e-3, periodMs: 60_000, maxDebt: 0 },
      1e9 - 1,
    );
    expect(await store.decideAt(glacial, 1_000)).toMatchObject({ allowed: true, fullInMs: MAX_WAIT_MS });
    expect(await admin.pttl(PREFIX + glacial.key)).toBe(-1); // exists, no expiry
  });

  it('gives the same answers as bucket.ts, bit for bit, over 10,000+ random operations', async () => {
    interface Op {
      key: number;
      stepMs: number;
      cost: number;
    }
    const stepArb = (limits: BucketLimits) =>
      fc.oneof(
        { weight: 12, arbitrary: stepMsArb(limits) },
        { weight: 1, arbitrary: fc.double({ min: -5_000, max: 0, noNaN: true }) },
      );
    const scenarioArb = fc.array(limitsArb, { minLength: 1, maxLength: 6 }).chain((keys) =>
      fc.record({
        keys: fc.constant(keys),
        startMs: startMsArb,
        ops: fc.array(
          fc
            .nat(keys.length - 1)
            .chain((key) =>
              fc.record({ key: fc.constant(key), stepMs: stepArb(keys[key]!), cost: costArb(keys[key]!) }),
            ) as fc.Arbitrary<Op>,
          { minLength: 420, maxLength: 600, size: 'max' },
        ),
      }),
    );
    let run = 0;
    let operations = 0;
    let denials = 0;
    await fc.assert(
      fc.asyncProperty(scenarioArb, async ({ keys, startMs, ops }) => {
        run++;
        // the reference: bucket.ts with state kept the way the script keeps it
        const states = new Map<number, BucketState>();
        const expected: Decision[] = [];
        const sent: Promise<Decision>[] = [];
        let nowMs = startMs;
        for (const op of ops) {
          nowMs += op.stepMs;
          const limits = keys[op.key]!;
          const { decision, state, changed } = decide(states.get(op.key), limits, op.cost, nowMs);
          if (changed) {
            if (decision.fullInMs === 0) states.delete(op.key);
            else states.set(op.key, state);
          }
          expected.push(decision);
          // sent without waiting: one connection keeps them in order, so this is a pipeline
          sent.push(
            store.decideAt(request(`diff-${run}-${op.key}`, limits, op.cost), nowMs, SIMULATION_TTL_MS),
          );
        }
        const actual = await Promise.all(sent);
        operations += ops.length;
        denials += expected.filter((d) => !d.allowed).length;
        const first = actual.findIndex((d, i) => !sameDecision(d, expected[i]!));
        if (first >= 0) {
          const op = ops[first]!;
          expect({ op, limits: keys[op.key], lua: actual[first] }).toEqual({
            op,
            limits: keys[op.key],
            lua: expected[first],
          });
        }
      }),
      { numRuns: 25 },
    );
    expect(operations).toBeGreaterThanOrEqual(10_000);
    expect(denials).toBeGreaterThan(1_000);
  });
});

function sameDecision(a: Decision, b: Decision): boolean {
  return (
    a.allowed === b.allowed &&
    Object.is(a.balance, b.balance) &&
    a.retryAfterMs === b.retryAfterMs &&
    a.fullInMs === b.fullInMs
  );
}

describe('RedisStore on the Redis clock', () => {
  it('uses Redis TIME: the balance refills between two calls, and the bucket is stamped with Redis time', async () => {
    const limits: BucketLimits = { capacity: 100, refill: 100, periodMs: 1_000, maxDebt: 0 };
    const req = request('redis-time', limits, 50);
    expect(await store.decide(req)).toMatchObject({ allowed: true, balance: 50 });
    await sleep(60);
    const second = await store.decide({ ...req, cost: 1 });
    expect(second.allowed).toBe(true);
    expect(second.balance).toBeGreaterThanOrEqual(50); // gained at least a token in 60 ms at 0.1/ms
    expect(second.balance).toBeLessThan(99);

    const [seconds, micros] = await admin.time();
    const redisNowMs = Number(seconds) * 1_000 + Number(micros) / 1_000;
    const stored = (await admin.get(PREFIX + req.key))!;
    const updatedAtMs = Number(stored.split(' ')[1]);
    expect(Math.abs(redisNowMs - updatedAtMs)).toBeLessThan(5_000);
  });

  it('lets the key expire once the bucket is full again; the next request finds a full bucket', async () => {
    const limits: BucketLimits = { capacity: 2, refill: 2, periodMs: 100, maxDebt: 0 };
    const req = request('expires', limits, 2);
    const first = await store.decide(req);
    expect(first).toMatchObject({ allowed: true, balance: 0 });
    expect(first.fullInMs).toBeLessThanOrEqual(100);
    expect(await admin.pttl(PREFIX + req.key)).toBeLessThanOrEqual(100);
    await sleep(first.fullInMs + 50);
    expect(await admin.exists(PREFIX + req.key)).toBe(0);
    expect(await store.decide(req)).toMatchObject({ allowed: true, balance: 0 });
  });

  it('sends EVAL once per connection, then EVALSHA, and recovers from SCRIPT FLUSH by itself', async () => {
    const fresh = new RedisStore(REDIS_URL, { keyPrefix: PREFIX, commandTimeoutMs: 5_000 });
    const monitor = await admin.monitor();
    const seen: string[] = [];
    const key = request('evalsha', spec, 1);
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[3] === PREFIX + key.key) seen.push(String(args[0]).toLowerCase());
    });
    try {
      await fresh.ready();
      await fresh.decide(key);
      await fresh.decide(key);
      await admin.script('FLUSH');
      expect((await fresh.decide(key)).allowed).toBe(true); // NOSCRIPT, then EVAL, invisibly
      await fresh.decide(key);
      for (let i = 0; i < 40 && seen.length < 5; i++) await sleep(25);
      expect(seen).toEqual(['eval', 'evalsha', 'evalsha', 'eval', 'evalsha']);
      const sha = createHash('sha1').update(TOKEN_BUCKET_LUA).digest('hex');
      expect(await admin.script('EXISTS', sha)).toEqual([1]);
    } finally {
      monitor.disconnect();
      await fresh.close();
    }
  });

  it('coalesceWrites: the decisions of one turn leave in one socket write, each its own EVALSHA and answer', async () => {
    const limits: BucketLimits = { capacity: 5, refill: 1, periodMs: 60_000, maxDebt: 0 };
    /** socket-level writes while 8 decisions are asked in one turn */
    const writesFor = async (coalesceWrites: boolean, client: string) => {
      const fresh = new RedisStore(REDIS_URL, { keyPrefix: PREFIX, commandTimeoutMs: 5_000, coalesceWrites });
      try {
        await fresh.ready();
        await fresh.decide(request(`${client}-warm`, limits, 1)); // the script is loaded (EVAL) once
        const stream = fresh.client.stream as unknown as Record<
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
          Array.from({ length: 8 }, () => fresh.decide(request(client, limits, 1))),
        );
        expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
        expect(decisions.slice(0, 5).map((d) => Math.floor(d.balance))).toEqual([4, 3, 2, 1, 0]);
        return writes;
      } finally {
        await fresh.close();
      }
    };
    expect(await writesFor(true, 'coalesced')).toBe(1);
    expect(await writesFor(false, 'one-by-one')).toBeGreaterThan(1);
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
    expect((await a.decide(request('shared-client', spec, 1))).balance).toBe(9);
    expect((await b.decide(request('shared-client', spec, 1))).balance).toBeLessThan(9);
    await a.close();
    await b.close();
    expect(client.status).toBe('ready');
    await expectStoreError(a.decide(request('shared-client', spec, 1)), 'STORE_UNAVAILABLE');
    await client.quit();
  });

  it('rejects with STORE_ERROR when Redis answers with an error', async () => {
    const req = request('wrong-type', spec, 1);
    await admin.hset(PREFIX + req.key, 'not', 'a bucket');
    await expectStoreError(store.decide(req), 'STORE_ERROR');
  });
});

describe('RedisStore when Redis is away', () => {
  it('rejects at once with STORE_UNAVAILABLE when nothing listens (no offline queue)', async () => {
    const dead = new RedisStore('redis://127.0.0.1:1', { commandTimeoutMs: 200 });
    try {
      await expectStoreError(dead.decide(request('dead', spec, 1)), 'STORE_UNAVAILABLE');
      await expectStoreError(dead.ready(300), 'STORE_UNAVAILABLE');
    } finally {
      await dead.close();
    }
  });

  describe('with a Redis of its own', () => {
    let server: ChildProcess | undefined;
    let port = 0;

    const startRedis = async () => {
      server = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {
          stdio: 'ignore',
        },
      );
      const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      for (let i = 0; i < 100; i++) {
        try {
          if (probe.status === 'wait') await probe.connect();
          if ((await probe.ping()) === 'PONG') break;
        } catch {
          await sleep(50);
        }
      }
      probe.disconnect();
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
        expect((await own.decide(request('paused', spec, 1))).allowed).toBe(true);
        await control.client('PAUSE', 500, 'ALL');
        await expectStoreError(own.decide(request('paused', spec, 1)), 'STORE_TIMEOUT');
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
        expect(await own.decide(request('restart', spec, 4))).toMatchObject({ allowed: true, balance: 6 });
        await stopRedis();
        await expectStoreError(own.decide(request('restart', spec, 1)), 'STORE_UNAVAILABLE');
        await startRedis();
        await own.ready(5_000);
        // a new server: no script cached (EVALSHA would be NOSCRIPT) and no bucket kept
        expect(await own.decide(request('restart', spec, 4))).toMatchObject({ allowed: true, balance: 6 });
      } finally {
        await own.close();
      }
    });
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}
