/**
 * Batching against the real Redis (127.0.0.1:6379) and a Redis of this file's own: the same random
 * requests decided one call each (unbatched, one by one) and in random batches give the same
 * decisions, the same settlements and the same stored state; the batch cap; a failed batch fails every
 * one of its callers; a request with bad arguments fails alone.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACQUIRE_FUNCTION } from './acquire-script.js';
import {
  type LimitCheck,
  limitKey,
  type SettledLimit,
  type Settlement,
  type StoreDecision,
} from './limits.js';
import { MAX_BATCH_KEYS, MAX_BATCH_REQUESTS } from './redis/batching.js';
import { RedisStore } from './redis-store.js';
import { StoreError } from './store.js';
import { specArb, specCostArb, specStepMsArb, startMsArb } from './test-arbitraries.js';
import { SimulatedClock } from './test-clock.js';
import { freePort, startOwnRedis } from './test-redis.js';
import { SIMULATION_TTL_MS, sameDecision } from './test-reference.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const PREFIX = `test:batching:${randomUUID()}:`;

let unbatched: RedisStore;
let batched: RedisStore;
let admin: Redis;

/** both stores' clock: each op is asked at its own instant, so a batch may span several */
const clock = new SimulatedClock();

beforeAll(async () => {
  const options = { keyPrefix: PREFIX, commandTimeoutMs: 5_000, now: clock.now, minTtlMs: SIMULATION_TTL_MS };
  unbatched = new RedisStore(REDIS_URL, { ...options, batching: false });
  batched = new RedisStore(REDIS_URL, options);
  admin = new Redis(REDIS_URL);
  await Promise.all([unbatched.ready(), batched.ready()]);
});

afterAll(async () => {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${PREFIX}*`, 'COUNT', 1_000);
    if (keys.length) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  await Promise.all([unbatched.close(), batched.close()]);
  await admin.quit();
});

/**
 * Watches the script calls (FCALL or EVALSHA) that name `key` (the store's prefix included); the
 * function returned stops watching and gives what was sent (the monitor's lines arrive after the
 * replies, so it waits a little first).
 */
async function watchScriptCalls(key: string): Promise<() => Promise<string[][]>> {
  const sent: string[][] = [];
  const monitor = await admin.duplicate().monitor();
  monitor.on('monitor', (_time: string, args: string[]) => {
    const command = args[0]?.toLowerCase();
    if ((command === 'evalsha' || command === 'fcall') && args.includes(key)) sent.push(args);
  });
  return async () => {
    await sleep(100);
    monitor.disconnect();
    return sent;
  };
}

/** An acquire of 1–4 limits of the pool, or a settlement of an earlier admitted acquire. */
type Op =
  | { kind: 'acquire'; limits: number[]; costs: number[]; stepMs: number }
  | { kind: 'settle'; target: number; deltaFactors: number[]; stepMs: number };

interface Interleaving {
  pool: Awaited<ReturnType<typeof specArb.generate>>['value'][];
  startMs: number;
  /** the ops, cut into chunks: a chunk is asked in one event-loop turn (batched: one or a few calls) */
  chunks: Op[][];
}

const interleavingArb: fc.Arbitrary<Interleaving> = fc
  .array(specArb, { minLength: 1, maxLength: 6 })
  .chain((pool) => {
    // mostly the same clock within a chunk (one batch), sometimes a step (the batch is cut there)
    const stepArb = fc.oneof(
      { weight: 6, arbitrary: fc.constant(0) },
      { weight: 1, arbitrary: specStepMsArb(pool[0]!) },
    );
    const acquireArb = fc
      .uniqueArray(fc.nat(pool.length - 1), { minLength: 1, maxLength: Math.min(4, pool.length) })
      .chain((limits) =>
        fc.record({
          kind: fc.constant('acquire' as const),
          limits: fc.constant(limits),
          costs: fc.tuple(...limits.map((i) => specCostArb(pool[i]!))),
          stepMs: stepArb,
        }),
      );
    const settleArb = fc.record({
      kind: fc.constant('settle' as const),
      target: fc.nat(),
      deltaFactors: fc.array(fc.double({ min: -1, max: 1, noNaN: true }), { minLength: 4, maxLength: 4 }),
      stepMs: stepArb,
    });
    const opArb: fc.Arbitrary<Op> = fc.oneof(
      { weight: 4, arbitrary: acquireArb },
      { weight: 1, arbitrary: settleArb },
    );
    return fc.record({
      pool: fc.constant(pool),
      startMs: startMsArb,
      chunks: fc.array(fc.array(opArb, { minLength: 20, maxLength: 90, size: 'max' }), {
        minLength: 4,
        maxLength: 8,
        size: 'max',
      }),
    });
  });

interface Outcome {
  decisions: (StoreDecision | undefined)[];
  settled: (SettledLimit[] | undefined)[];
  state: Map<string, string>;
  ops: number;
}

/**
 * Runs one interleaving on `store` under its own run id. A settlement targets an acquire of an
 * earlier chunk (its decision known when the chunk is asked): it gives back or charges a fraction of
 * each limit's cost, at the acquire's clock. `oneByOne`: each op waits for the one before.
 */
async function runOn(
  store: RedisStore,
  scenario: Interleaving,
  run: string,
  oneByOne: boolean,
): Promise<Outcome> {
  const decisions: (StoreDecision | undefined)[] = [];
  const settled: (SettledLimit[] | undefined)[] = [];
  const acquired: { checks: LimitCheck[]; index: number }[] = [];
  let nowMs = scenario.startMs;
  let index = 0;
  for (const chunk of scenario.chunks) {
    const admittedBefore = acquired.filter(({ index: i }) => decisions[i]?.allowed);
    const asked: Promise<void>[] = [];
    for (const op of chunk) {
      nowMs += op.stepMs;
      const i = index++;
      let done: Promise<void>;
      if (op.kind === 'acquire') {
        const checks: LimitCheck[] = op.limits.map((limit, j) => ({
          key: limitKey('', run, `l${limit}`, 'client'),
          spec: scenario.pool[limit]!,
          cost: op.costs[j]!,
        }));
        acquired.push({ checks, index: i });
        done = clock
          .at(nowMs, () => store.acquire(checks))
          .then((d) => {
            decisions[i] = d;
          });
      } else {
        const target = admittedBefore[op.target % Math.max(admittedBefore.length, 1)];
        if (target === undefined) continue;
        const settlements: Settlement[] = target.checks.map((check, j) => ({
          key: check.key,
          spec: check.spec,
          delta: op.deltaFactors[j]! * check.cost,
          admittedAtMs: decisions[target.index]!.atMs!,
        }));
        done = clock
          .at(nowMs, () => store.settle(settlements))
          .then((s) => {
            settled[i] = s;
          });
      }
      if (oneByOne) await done;
      else asked.push(done);
    }
    await Promise.all(asked);
  }
  const ops = decisions.filter(Boolean).length + settled.filter(Boolean).length;
  return { decisions, settled, state: await dump(run), ops };
}

/** Every key of one run, without its run id: TYPE, then its value (string or sorted set). */
async function dump(run: string): Promise<Map<string, string>> {
  const state = new Map<string, string>();
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${PREFIX}*${run}*`, 'COUNT', 1_000);
    for (const key of keys) {
      const type = await admin.type(key);
      const value =
        type === 'string'
          ? await admin.get(key)
          : JSON.stringify(await admin.zrange(key, 0, -1, 'WITHSCORES'));
      state.set(key.replace(run, 'RUN'), `${type} ${value}`);
    }
    cursor = next;
  } while (cursor !== '0');
  return state;
}

describe('batching changes the cost, never a result', () => {
  it('random interleavings: one call each, one by one, and random batches decide alike and leave the same state (10,000+ operations)', async () => {
    let operations = 0;
    let settlements = 0;
    let denials = 0;
    let run = 0;
    const callsBefore = batched.scriptCalls;
    await fc.assert(
      fc.asyncProperty(interleavingArb, async (scenario) => {
        run++;
        const id = `${run}-${Math.random().toString(36).slice(2)}`;
        const a = await runOn(unbatched, scenario, `a-${id}`, true);
        const b = await runOn(batched, scenario, `b-${id}`, false);
        operations += a.ops;
        settlements += a.settled.filter(Boolean).length;
        denials += a.decisions.filter((d) => d && !d.allowed).length;
        expect(b.decisions.length).toBe(a.decisions.length);
        a.decisions.forEach((d, i) => {
          if (d === undefined) expect(b.decisions[i]).toBeUndefined();
          else if (!sameDecision(d, b.decisions[i]!) || d.atMs !== b.decisions[i]!.atMs)
            expect({ i, decision: b.decisions[i] }).toEqual({ i, decision: d });
        });
        expect(b.settled).toEqual(a.settled);
        expect(b.state).toEqual(a.state);
      }),
      { numRuns: 40 },
    );
    const calls = batched.scriptCalls - callsBefore;
    console.log('batching differential:', { operations, settlements, denials, batchedScriptCalls: calls });
    expect(operations).toBeGreaterThanOrEqual(10_000);
    expect(denials).toBeGreaterThan(0);
    expect(settlements).toBeGreaterThan(0);
    // batching did happen: far fewer script calls than operations
    expect(calls).toBeLessThan(operations / 4);
  }, 120_000);

  it('runs of identical requests (a hot client: "again") decide alike one by one and batched, edits and denials included, and leave the same state', async () => {
    // limits that may share a key (two pool entries on one key: an edit between runs, or another
    // algorithm there), runs of 1–12 identical requests asked in one turn, clock steps between runs
    const runsArb = fc
      .array(specArb, { minLength: 1, maxLength: 5 })
      .chain((pool) =>
        fc.record({
          pool: fc.constant(pool),
          keyOf: fc.tuple(...pool.map(() => fc.nat(2))),
          startMs: startMsArb,
        }),
      )
      .chain(({ pool, keyOf, startMs }) => {
        const runArb = fc
          .uniqueArray(fc.nat(pool.length - 1), {
            minLength: 1,
            maxLength: Math.min(3, pool.length),
            selector: (i) => keyOf[i]!,
          })
          .chain((limits) =>
            fc.record({
              limits: fc.constant(limits),
              costs: fc.tuple(...limits.map((i) => specCostArb(pool[i]!))),
              times: fc.integer({ min: 1, max: 12 }),
              stepMs: fc.oneof(
                { weight: 3, arbitrary: fc.constant(0) },
                { weight: 2, arbitrary: specStepMsArb(pool[0]!) },
              ),
            }),
          );
        return fc.record({
          pool: fc.constant(pool),
          keyOf: fc.constant(keyOf),
          startMs: fc.constant(startMs),
          chunks: fc.array(fc.array(runArb, { minLength: 1, maxLength: 6 }), { minLength: 2, maxLength: 6 }),
        });
      });
    type RunsScenario = typeof runsArb extends fc.Arbitrary<infer T> ? T : never;

    const play = async (store: RedisStore, scenario: RunsScenario, run: string, oneByOne: boolean) => {
      const decisions: StoreDecision[] = [];
      let nowMs = scenario.startMs;
      for (const chunk of scenario.chunks) {
        const asked: Promise<void>[] = [];
        for (const { limits, costs, times, stepMs } of chunk) {
          nowMs += stepMs;
          for (let t = 0; t < times; t++) {
            const i = decisions.length;
            decisions.push(undefined as unknown as StoreDecision);
            const checks: LimitCheck[] = limits.map((limit, j) => ({
              key: limitKey('', run, `k${scenario.keyOf[limit]}`, 'client'),
              spec: scenario.pool[limit]!,
              cost: costs[j]!,
            }));
            const done = clock
              .at(nowMs, () => store.acquire(checks))
              .then((d) => {
                decisions[i] = d;
              });
            if (oneByOne) await done;
            else asked.push(done);
          }
        }
        await Promise.all(asked);
      }
      return { decisions, state: await dump(run) };
    };

    let decided = 0;
    let denied = 0;
    let agains = 0;
    const monitor = await admin.duplicate().monitor();
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args.some((arg) => arg.includes('again-b-')))
        agains += args.filter((arg) => arg === 'again').length;
    });
    try {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(runsArb, async (scenario) => {
          run++;
          const id = `${run}-${Math.random().toString(36).slice(2)}`;
          const a = await play(unbatched, scenario, `again-a-${id}`, true);
          const b = await play(batched, scenario, `again-b-${id}`, false);
          decided += a.decisions.length;
          denied += a.decisions.filter((d) => !d.allowed).length;
          a.decisions.forEach((d, i) => {
            if (!sameDecision(d, b.decisions[i]!) || d.atMs !== b.decisions[i]!.atMs)
              expect({ i, decision: b.decisions[i] }).toEqual({ i, decision: d });
          });
          expect(b.state).toEqual(a.state);
        }),
        { numRuns: 60 },
      );
      await sleep(200); // the monitor's lines arrive after the replies
    } finally {
      monitor.disconnect();
    }
    console.log('"again" differential:', { decided, denied, agains });
    expect(decided).toBeGreaterThan(1_000);
    expect(denied).toBeGreaterThan(decided / 20);
    // the batched store did send runs as "again"
    expect(agains).toBeGreaterThan(40);
  }, 120_000);

  it('concurrency slots: takes, give-backs and renewals on shared keys decide alike one by one and in batches, and every key keeps an expiry', async () => {
    // slots on one or two keys, leases short enough that clock steps expire some; a give-back names its
    // admission's clock (as the gateway does) or 0 (unknown); a take may reuse a lease id already there
    const specArbSlots = fc.record({
      algorithm: fc.constant('concurrency' as const),
      max: fc.integer({ min: 1, max: 4 }),
      leaseMs: fc.constantFrom(1, 50, 1_000),
    });
    const slotsOpArb = fc.record({
      kind: fc.constantFrom('take', 'take', 'give-back', 'renew'),
      limit: fc.nat(1),
      pick: fc.nat(),
      knownClock: fc.boolean(),
      reuse: fc.boolean(),
      stepMs: fc.oneof(
        { weight: 5, arbitrary: fc.constant(0) },
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 1_500 }) },
      ),
    });
    const scenarioArb = fc.record({
      // or a clock that crosses 2^53 ms, where now + leaseMs can round to now (a lease born expired)
      startMs: fc.constantFrom(1_700_000_000_000, 2 ** 53 - 1_000),
      pool: fc.array(specArbSlots, { minLength: 1, maxLength: 2 }),
      chunks: fc.array(fc.array(slotsOpArb, { minLength: 5, maxLength: 40 }), { minLength: 3, maxLength: 6 }),
    });
    type SlotsScenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

    const play = async (store: RedisStore, scenario: SlotsScenario, run: string, oneByOne: boolean) => {
      const answers: unknown[] = [];
      const taken: { limit: number; leaseId: string; atMs: number }[] = [];
      let nowMs = scenario.startMs;
      let id = 0;
      for (const chunk of scenario.chunks) {
        const takenBefore = [...taken];
        const asked: Promise<void>[] = [];
        for (const op of chunk) {
          nowMs += op.stepMs;
          const limit = op.limit % scenario.pool.length;
          const spec = scenario.pool[limit]!;
          const key = limitKey('', run, `s${limit}`, 'c:slots');
          const i = answers.push(undefined) - 1;
          let done: Promise<unknown>;
          if (op.kind === 'take' || takenBefore.length === 0) {
            // reuse: the id of the take before (admitted or not), decided by the scenario alone
            const leaseId = op.reuse && id > 0 ? `lease-${id}` : `lease-${++id}`;
            done = clock
              .at(nowMs, () => store.acquire([{ key, spec, cost: 1, leaseId }]))
              .then((d) => {
                if (d.allowed) taken.push({ limit, leaseId, atMs: d.atMs! });
                return d;
              });
          } else {
            const target = takenBefore[op.pick % takenBefore.length]!;
            done = clock.at(nowMs, () =>
              store.settle([
                {
                  key: limitKey('', run, `s${target.limit}`, 'c:slots'),
                  spec: scenario.pool[target.limit]!,
                  delta: 0,
                  admittedAtMs: op.knownClock ? target.atMs : 0,
                  leaseId: target.leaseId,
                  ...(op.kind === 'renew' && { renew: true }),
                },
              ]),
            );
          }
          const answered = done.then((a) => {
            answers[i] = a;
          });
          if (oneByOne) await answered;
          else asked.push(answered);
        }
        await Promise.all(asked);
        // after every call: a key is never left without an expiry (a slot key nobody renews must go)
        const [, keys] = await admin.scan('0', 'MATCH', `${PREFIX}*${run}*`, 'COUNT', 1_000);
        for (const key of keys) expect(await admin.pttl(key), key).toBeGreaterThan(0);
      }
      return answers;
    };

    let operations = 0;
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenarioArb, async (scenario) => {
        run++;
        const id = `${run}-${Math.random().toString(36).slice(2)}`;
        const a = await play(unbatched, scenario, `slots-a-${id}`, true);
        const b = await play(batched, scenario, `slots-b-${id}`, false);
        operations += a.length;
        expect(b).toEqual(a);
        expect(await dump(`slots-b-${id}`)).toEqual(await dump(`slots-a-${id}`));
      }),
      { numRuns: 60 },
    );
    expect(operations).toBeGreaterThanOrEqual(1_500);
  }, 120_000);

  it(`caps a batch at ${MAX_BATCH_REQUESTS} requests and ${MAX_BATCH_KEYS} keys`, async () => {
    const spec = {
      algorithm: 'token-bucket',
      capacity: 1e9,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 0,
    } as const;
    const oneKey = (i: number): LimitCheck[] => [{ key: limitKey('', 'cap', '', `c${i}`), spec, cost: 1 }];
    let before = batched.scriptCalls;
    const single = await Promise.all(Array.from({ length: 200 }, (_, i) => batched.acquire(oneKey(i))));
    expect(single.every((d) => d.allowed)).toBe(true);
    expect(batched.scriptCalls - before).toBe(Math.ceil(200 / MAX_BATCH_REQUESTS)); // 64 + 64 + 64 + 8

    const fourKeys = (i: number): LimitCheck[] =>
      [0, 1, 2, 3].map((j) => ({ key: limitKey('', 'cap4', `l${j}`, `c${i}`), spec, cost: 1 }));
    before = batched.scriptCalls;
    const stacked = await Promise.all(Array.from({ length: 40 }, (_, i) => batched.acquire(fourKeys(i))));
    expect(stacked.every((d) => d.allowed && d.limits.length === 4)).toBe(true);
    expect(batched.scriptCalls - before).toBe(Math.ceil((40 * 4) / MAX_BATCH_KEYS)); // 32 requests, then 8
  });

  it('a request with bad arguments fails alone; the others of its batch are decided', async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'bad', '', name)}`;
    const bucket = ['token-bucket', '1', '5', '1', '1000', '0', 'T5/1/1000'];
    const reply = (await batched.client.sluiceAcquire(
      3,
      key('x'),
      key('y'),
      key('z'),
      'batch',
      '',
      '',
      '3',
      ...['acquire', '1', String(bucket.length), ...bucket],
      ...['acquire', '1', '2', 'no-such-algorithm', '1'],
      ...['acquire', '1', String(bucket.length), ...bucket],
    )) as unknown[];
    expect(reply).toHaveLength(3);
    expect(String(reply[0]).split(' ')[0]).toBe('1');
    expect(reply[1]).toBeInstanceOf(Error);
    expect(String(reply[1])).toMatch(/unknown algorithm/);
    expect(String(reply[2]).split(' ')[0]).toBe('1');
    expect(await admin.exists(key('y'))).toBe(0);
  });

  it('an "again" of a concurrency take sends its own lease ids and is decided in a row; one without them, or with no acquire before it, fails the batch', async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'again-bad', '', name)}`;
    const bucket = ['token-bucket', '1', '5', '1', '1000', '0', 'T5/1/1000'];
    // the limit's values, then the request's id (its lease id)
    const slots = ['concurrency', '1', '2', '60000', 'lease-1'];
    const reply = (await batched.client.sluiceAcquire(
      2,
      key('slots'),
      key('bucket'),
      'batch-repeats',
      '',
      '',
      '4',
      ...['acquire', '1', String(slots.length), ...slots],
      ...['again', '2', 'lease-2', 'lease-3'],
      ...['acquire', '1', String(bucket.length), ...bucket],
      ...['again', '3'],
    )) as unknown[];
    expect(reply).toHaveLength(4);
    expect(String(reply[0]).split(' ')[0]).toBe('1');
    // of the 2 more takes, 1 admitted (max 2), with 1 slot held before them
    const [admitted, , heldBefore] = String(reply[1]).split('\n');
    expect([admitted, heldBefore]).toEqual(['1', '1']);
    expect((await admin.zrange(key('slots'), 0, -1)).sort()).toEqual(['lease-1', 'lease-2']);
    // the bucket's request, then 3 more alike: how many admitted, the clock, the state the first left
    expect(String(reply[3]).split('\n')[0]).toBe('3');
    expect(String(reply[3]).split('\n')[2]?.split(' ')[0]).toBe('4');
    expect((await admin.get(key('bucket')))?.split(' ')[0]).toBe('1');
    await expect(
      batched.client.sluiceAcquire(1, key('bucket'), 'batch', '', '', '1', ...['again', '2']),
    ).rejects.toThrow(/bad header of request 1/);
    await expect(
      batched.client.sluiceAcquire(
        1,
        key('slots'),
        'batch',
        '',
        '',
        '2',
        ...['acquire', '1', String(slots.length), ...slots],
        ...['again', '2'],
      ),
    ).rejects.toThrow(/bad header of request 2/);
  });

  it("a settlement asked alone waits one turn more, for the next turn's decisions to ride with; alone, it still goes", async () => {
    const spec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 60_000,
      maxDebt: 0,
    } as const;
    const key = limitKey('', 'ride', '', `k-${Date.now()}`);
    const admitted = await batched.acquire([{ key, spec, cost: 3 }]);
    const turn = () => new Promise((resolve) => setImmediate(resolve));

    // a give-back at the end of one turn, a decision in the next: one script call, in that order
    let before = batched.scriptCalls;
    const settled = batched.settle([{ key, spec, delta: -3, admittedAtMs: admitted.atMs! }]);
    await turn();
    const decided = batched.acquire([{ key, spec, cost: 10 }]);
    expect((await settled)[0]!.remaining).toBeCloseTo(10, 3);
    expect((await decided).allowed).toBe(true); // it saw the 3 given back
    expect(batched.scriptCalls - before).toBe(1);

    // nothing follows: the settlement goes after its extra turn, alone
    before = batched.scriptCalls;
    const alone = await batched.settle([{ key, spec, delta: -10, admittedAtMs: admitted.atMs! }]);
    expect(alone[0]!.remaining).toBeCloseTo(10, 3);
    expect(batched.scriptCalls - before).toBe(1);

    // asked in one turn with a decision: one call
    before = batched.scriptCalls;
    const together = batched.settle([{ key, spec, delta: 1, admittedAtMs: admitted.atMs! }]);
    const next = batched.acquire([{ key, spec, cost: 1 }]);
    expect((await next).limits[0]!.remaining).toBeCloseTo(8, 3);
    await together;
    expect(batched.scriptCalls - before).toBe(1);
  });

  it("a decision waits a turn for the next turn's requests, a second while they keep coming, then goes", async () => {
    const spec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 60_000,
      maxDebt: 0,
    } as const;
    const key = limitKey('', 'held', '', `k-${Date.now()}`);
    const turn = () => new Promise((resolve) => setImmediate(resolve));

    // decisions asked in three turns in a row: one script call, decided in the order asked
    let before = batched.scriptCalls;
    const first = batched.acquire([{ key, spec, cost: 4 }]);
    await turn();
    const second = batched.acquire([{ key, spec, cost: 4 }]);
    await turn();
    const third = batched.acquire([{ key, spec, cost: 4 }]);
    expect((await first).allowed).toBe(true);
    expect((await second).allowed).toBe(true);
    expect((await third).allowed).toBe(false); // 2 left after the two before it
    expect(batched.scriptCalls - before).toBe(1);

    // a fourth turn in a row is not waited for: a steady stream still leaves every few turns
    const roomy = { ...spec, capacity: 100 };
    const other = limitKey('', 'held', '', `o-${Date.now()}`);
    before = batched.scriptCalls;
    const asked: Promise<unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      asked.push(batched.acquire([{ key: other, spec: roomy, cost: 1 }]));
      await turn();
    }
    await Promise.all(asked);
    expect(batched.scriptCalls - before).toBe(2);

    // alone, it goes after one empty turn
    before = batched.scriptCalls;
    expect((await batched.acquire([{ key: other, spec: roomy, cost: 1 }])).allowed).toBe(true);
    expect(batched.scriptCalls - before).toBe(1);
  });

  it('a batch far longer than the gateway ever sends (9,000 requests) is decided whole', async () => {
    const key = (i: number) => `${PREFIX}${limitKey('', 'long', '', `k${i % 7}`)}`;
    const bucket = ['token-bucket', '1', '5000', '1', '60000', '0', 'T5000/1/60000'];
    const m = 9_000;
    const requests = Array.from({ length: m }, (_, j) =>
      j === 0 ? ['acquire', '1', String(bucket.length), ...bucket] : ['acquire', '1', '@1'],
    );
    const reply = (await batched.client.sluiceAcquire(
      m,
      ...Array.from({ length: m }, (_, j) => key(j)),
      'batch-repeats',
      '',
      '',
      String(m),
      ...requests.flat(),
    )) as unknown as string[];
    expect(reply).toHaveLength(m);
    // 7 keys of 5,000 tokens, about 1,286 requests each: every one admitted
    expect(reply.every((r) => r.startsWith('1 '))).toBe(true);
    expect(Number(reply[m - 1]!.split(' ')[1])).toBe(5_000 - Math.ceil((m - ((m - 1) % 7)) / 7));
  });

  it('"batch-repeats" (keys shared by requests): each request sees the writes before it; the key ends with the last', async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'repeats', '', name)}`;
    const bucket = ['token-bucket', '1', '5', '1', '60000', '0', 'T5/1/60000'];
    const reply = (await batched.client.sluiceAcquire(
      4,
      key('x'),
      key('y'),
      key('x'),
      key('x'),
      'batch-repeats',
      '',
      '',
      '4',
      ...['acquire', '1', String(bucket.length), ...bucket],
      ...['acquire', '1', '2', 'no-such-algorithm', '1'],
      ...['acquire', '1', '@1'],
      ...['settle', '1', '9', 'token-bucket', '5', '1', '60000', '0', 'T5/1/60000', '-1', '0', ''],
    )) as unknown[];
    expect(reply).toHaveLength(4);
    expect(String(reply[0]).split(' ').slice(0, 2)).toEqual(['1', '4']);
    expect(reply[1]).toBeInstanceOf(Error);
    expect(String(reply[2]).split(' ').slice(0, 2)).toEqual(['1', '3']); // saw the first one's charge
    expect(Math.round(Number(String(reply[3]).split(' ')[0]))).toBe(4); // the settlement gave one back
    expect(Math.round(Number((await admin.get(key('x')))?.split(' ')[0]))).toBe(4);
    expect(await admin.pttl(key('x'))).toBeGreaterThan(0); // written with its time to live
    expect(await admin.exists(key('y'))).toBe(0);
  });
});

describe("a batch's shared arguments", () => {
  it("a request refers back to an earlier one's arguments ('@<r>'): decided on its own key, as if repeated", async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'backref', '', name)}`;
    const bucket = ['token-bucket', '2', '5', '1', '1000', '0', 'T5/1/1000'];
    const reply = (await batched.client.sluiceAcquire(
      3,
      key('p'),
      key('q'),
      key('p'),
      'batch',
      '',
      '',
      '3',
      ...['acquire', '1', String(bucket.length), ...bucket],
      ...['acquire', '1', '@1'],
      ...['acquire', '1', '@2'],
    )) as unknown as string[];
    // cost 2 each: p takes 2 of 5, q its own 2 of 5, p again 2 more (1 left)
    expect(reply.map((r) => r.split(' ').slice(0, 2))).toEqual([
      ['1', '3'],
      ['1', '3'],
      ['1', '1'],
    ]);
    // a reference to a later request, or to none, is a bad header: the whole call fails, nothing written
    for (const ref of ['@2', '@0', '@x']) {
      await expect(
        batched.client.sluiceAcquire(
          2,
          key('r'),
          key('s'),
          'batch',
          '',
          '',
          '2',
          ...['acquire', '1', ref],
          ...['acquire', '1', String(bucket.length), ...bucket],
        ),
      ).rejects.toThrow(/bad header of request 1/);
    }
    expect(await admin.exists(key('r'), key('s'))).toBe(0);
  });

  it('requests on the same limits send their arguments once per batch', async () => {
    const spec = { algorithm: 'token-bucket', capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 0 } as const;
    const stop = await watchScriptCalls(`${PREFIX}${limitKey('', 'once', '', 'c0')}`);
    const decisions = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        batched.acquire([{ key: limitKey('', 'once', '', `c${i}`), spec, cost: 1 }]),
      ),
    );
    expect(decisions.every((d) => d.allowed && d.limits[0]!.level === 9)).toBe(true);
    const sent = await stop();
    expect(sent).toHaveLength(1);
    // one copy of the bucket's numbers, then four back-references to request 1
    expect(sent[0]!.filter((arg) => arg === 'token-bucket')).toHaveLength(1);
    expect(sent[0]!.filter((arg) => arg === '@1')).toHaveLength(4);
  });

  it('identical requests of one turn (a hot client) ride as one "again": its key and limits sent once, no reply each', async () => {
    const spec = { algorithm: 'token-bucket', capacity: 5, refill: 1, periodMs: 60_000, maxDebt: 0 } as const;
    const key = limitKey('', 'hot', '', 'client');
    const stop = await watchScriptCalls(`${PREFIX}${key}`);
    const decisions = await clock.at(1_700_000_000_000, () =>
      Promise.all(Array.from({ length: 8 }, () => batched.acquire([{ key, spec, cost: 1 }]))),
    );
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
    expect(decisions.map((d) => d.limits[0]!.remaining)).toEqual([4, 3, 2, 1, 0, 0, 0, 0]);
    expect(decisions.slice(5).map((d) => d.retryAfterMs)).toEqual([60_000, 60_000, 60_000]);
    const sent = await stop();
    expect(sent).toHaveLength(1);
    // the first request as usual, then "again" for the 7 others; the key once
    expect(sent[0]!.slice(-2)).toEqual(['again', '7']);
    expect(sent[0]!.filter((arg) => arg === `${PREFIX}${key}`)).toHaveLength(1);
    expect((await admin.get(`${PREFIX}${key}`))?.split(' ')[0]).toBe('0');
  });
});

describe("a batch's slot ids", () => {
  it('concurrency takes and give-backs on one limit in a row send its key and numbers once: each request its lease id', async () => {
    const spec = { algorithm: 'concurrency', max: 10, leaseMs: 60_000 } as const;
    const key = limitKey('', 'slot-ids', '', 'client');
    const stop = await watchScriptCalls(`${PREFIX}${key}`);
    const checks = Array.from({ length: 6 }, (_, i) => ({ key, spec, cost: 1, leaseId: `slot-${i}` }));
    const decisions = await clock.at(1_700_000_000_000, () =>
      Promise.all(checks.map((check) => batched.acquire([check]))),
    );
    expect(decisions.map((d) => d.limits[0]!.level)).toEqual([1, 2, 3, 4, 5, 6]);
    // every lease id is a member of the slot set, each with its own expiry
    const members = await admin.zrange(`${PREFIX}${key}`, 0, -1);
    expect(members.sort()).toEqual(checks.map((c) => c.leaseId).sort());
    const settled = await clock.at(1_700_000_000_100, () =>
      Promise.all(
        checks.map((check, i) =>
          batched.settle([
            { key, spec, delta: 0, admittedAtMs: decisions[i]!.atMs!, leaseId: check.leaseId },
          ]),
        ),
      ),
    );
    expect(settled).toHaveLength(6);
    expect(await admin.zcard(`${PREFIX}${key}`)).toBe(0);
    const sent = await stop();
    expect(sent).toHaveLength(2);
    for (const call of sent) {
      // the limit's numbers once; every request's own lease id once
      expect(call.filter((arg) => arg === 'concurrency')).toHaveLength(1);
      for (const check of checks) expect(call.filter((arg) => arg === check.leaseId)).toHaveLength(1);
    }
    // the takes in a row, and the give-backs of slots taken by one call in a row: the 5 after the
    // first ride as its "again", each sending its lease id and nothing else
    for (const call of sent) {
      expect(call.slice(-7)).toEqual(['again', '5', 'slot-1', 'slot-2', 'slot-3', 'slot-4', 'slot-5']);
    }
  });

  it('give-backs ride as an "again" only when they are alike: slots of another admission, or a cost settled, go on their own', async () => {
    const spec = { algorithm: 'concurrency', max: 10, leaseMs: 60_000 } as const;
    const bucket = {
      algorithm: 'token-bucket',
      capacity: 100,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 0,
    } as const;
    const key = limitKey('', 'slot-ids-mixed', '', 'client');
    const bucketKey = limitKey('', 'slot-ids-mixed', 'b', 'client');
    const take = (leaseId: string, atMs: number) =>
      clock.at(atMs, () => batched.acquire([{ key, spec, cost: 1, leaseId }]));
    const early = await Promise.all(['e-0', 'e-1'].map((id) => take(id, 1_700_000_000_000)));
    const late = await Promise.all(['l-0', 'l-1'].map((id) => take(id, 1_700_000_000_050)));
    await clock.at(1_700_000_000_050, () => batched.acquire([{ key: bucketKey, spec: bucket, cost: 5 }]));
    const stop = await watchScriptCalls(`${PREFIX}${key}`);
    const giveBack = (leaseId: string, atMs: number) => ({
      key,
      spec,
      delta: 0,
      admittedAtMs: atMs,
      leaseId,
    });
    const settled = await clock.at(1_700_000_000_100, () =>
      Promise.all([
        batched.settle([giveBack('e-0', early[0]!.atMs!)]),
        batched.settle([giveBack('e-1', early[1]!.atMs!)]),
        batched.settle([giveBack('l-0', late[0]!.atMs!)]),
        // a give-back beside a cost settled: applied on its own, never as one more give-back
        batched.settle([
          giveBack('l-1', late[1]!.atMs!),
          { key: bucketKey, spec: bucket, delta: -2, admittedAtMs: 1_700_000_000_050 },
        ]),
      ]),
    );
    // (the bucket refilled a little in the 50 ms since its charge)
    expect(settled.map((s) => s.map((limit) => Math.floor(limit.level)))).toEqual([[0], [0], [0], [0, 97]]);
    expect(await admin.zcard(`${PREFIX}${key}`)).toBe(0);
    const [call] = await stop();
    // one "again" of one rider (e-1 after e-0); l-0 and l-1 each their own request
    expect(call!.filter((arg) => arg === 'again')).toHaveLength(1);
    expect(call!.slice(call!.indexOf('again'), call!.indexOf('again') + 3)).toEqual(['again', '1', 'e-1']);
    expect(call!.filter((arg) => arg === 'settle')).toHaveLength(3);
  });

  it('an "again" of a settlement that is not a give-back is refused in its place; one of a settlement without ids, or short of its ids, fails the call', async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'again-settle-bad', '', name)}`;
    // a token bucket's settlement: name, 5 values, delta, admittedAtMs, refundMax
    const bucket = ['token-bucket', '5', '1', '1000', '0', 'T5/1/1000', '-1', '0', ''];
    // a slot given back: name, 2 values, delta 0, admittedAtMs, no refund, then its lease id
    const slot = ['concurrency', '5', '60000', '0', '0', '', 'lease-1'];
    // the same with a delta: not a give-back
    const charged = ['concurrency', '5', '60000', '1', '0', '', 'lease-1'];
    const reply = (await batched.client.sluiceAcquire(
      2,
      key('slots'),
      key('slots'),
      'batch-repeats',
      '',
      '',
      '4',
      ...['settle', '1', String(charged.length), ...charged],
      ...['again', '1', 'lease-x'],
      ...['settle', '1', String(slot.length), ...slot],
      ...['again', '2', 'lease-2', 'lease-3'],
    )) as unknown[];
    expect(reply).toHaveLength(4);
    expect(reply[1]).toBeInstanceOf(Error);
    expect(String(reply[1])).toMatch(/not a give-back/);
    expect(reply[2]).toBe('0 0');
    expect(reply[3]).toBe('0 0');
    await expect(
      batched.client.sluiceAcquire(
        1,
        key('bucket'),
        'batch',
        '',
        '',
        '2',
        ...['settle', '1', String(bucket.length), ...bucket],
        ...['again', '1'],
      ),
    ).rejects.toThrow(/bad header of request 2/);
    await expect(
      batched.client.sluiceAcquire(
        1,
        key('slots'),
        'batch',
        '',
        '',
        '2',
        ...['settle', '1', String(slot.length), ...slot],
        ...['again', '2', 'lease-2'],
      ),
    ).rejects.toThrow(/bad header of request 2/);
  });

  it('a request without its id, or with an empty one, fails alone; a reference to a request whose values were bad fails the call', async () => {
    const key = (name: string) => `${PREFIX}${limitKey('', 'slot-ids-bad', '', name)}:slots`;
    const slots = ['concurrency', '1', '5', '60000'];
    const reply = (await batched.client.sluiceAcquire(
      4,
      key('a'),
      key('b'),
      key('c'),
      key('d'),
      'batch',
      '',
      '',
      '4',
      ...['acquire', '1', String(slots.length), ...slots], // no id
      ...['acquire', '1', String(slots.length + 1), ...slots, ''], // an empty one
      ...['acquire', '1', String(slots.length + 1), ...slots, 'id-c'],
      ...['acquire', '1', '@3', 'id-d'],
    )) as unknown[];
    expect(reply).toHaveLength(4);
    expect(String(reply[0])).toMatch(/unexpected arguments/);
    expect(String(reply[1])).toMatch(/no id of check 1/);
    expect(String(reply[2]).split(' ').slice(0, 2)).toEqual(['1', '1']);
    expect(String(reply[3]).split(' ').slice(0, 2)).toEqual(['1', '1']);
    expect(await admin.zrange(key('c'), 0, -1)).toEqual(['id-c']);
    expect(await admin.zrange(key('d'), 0, -1)).toEqual(['id-d']);
    expect(await admin.exists(key('a'), key('b'))).toBe(0);
    // request 1's values were bad: how many ids a reference to it sends is not known
    await expect(
      batched.client.sluiceAcquire(
        2,
        key('e'),
        key('f'),
        'batch',
        '',
        '',
        '2',
        ...['acquire', '1', '3', 'concurrency', '1', '0'],
        ...['acquire', '1', '@1', 'id-f'],
      ),
    ).rejects.toThrow(/bad header of request 2/);
    expect(await admin.exists(key('e'), key('f'))).toBe(0);
  });
});

describe("the library's header numbers, kept from call to call", () => {
  let server: ChildProcess | undefined;
  let own: Redis;
  let store: RedisStore;

  // a Redis of this test's own: its Lua memory is this test's alone
  beforeAll(async () => {
    const port = await freePort();
    server = await startOwnRedis(port);
    store = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 5_000 });
    own = new Redis({ port });
    await store.ready();
  });
  afterAll(async () => {
    await store.close();
    own.disconnect();
    if (server && server.exitCode === null) server.kill('SIGKILL');
  });

  const functionsMemory = async () =>
    Number(/used_memory_vm_functions:(\d+)/.exec(await own.info('memory'))?.[1] ?? Number.NaN);

  it('are forgotten past 256 texts: odd headers cannot grow them without bound, and decide alike', async () => {
    expect(store.scriptMode).toBe('function');
    const key = `${PREFIX}${limitKey('', 'headers', '', 'c')}`;
    const bucket = ['token-bucket', '1', '1000000', '1', '1000', '0', 'T1000000/1/1000'];
    // "again" counts of 1 to 9 written 20,000 ways ('007', '7 ', ...: tonumber reads them all)
    const texts = Array.from({ length: 20_000 }, (_, i) => {
      const k = (i % 9) + 1;
      return { k, text: `${'0'.repeat(Math.floor(i / 9) % 150)}${k}${' '.repeat(Math.floor(i / 1_350))}` };
    });
    expect(new Set(texts.map(({ text }) => text)).size).toBe(texts.length);
    const call = (text: string) =>
      own.fcall(
        ACQUIRE_FUNCTION,
        1,
        key,
        'batch-repeats',
        '',
        '',
        '2',
        ...['acquire', '1', String(bucket.length), ...bucket],
        ...['again', text],
      ) as Promise<string[]>;
    await call('1');
    const before = await functionsMemory();
    for (let at = 0; at < texts.length; at += 1_000) {
      const chunk = texts.slice(at, at + 1_000);
      const replies = await Promise.all(chunk.map(({ text }) => call(text)));
      // the "again" admitted its k requests, each text read as its number
      expect(replies.map((reply) => Number(reply[1]!.split('\n')[0]))).toEqual(chunk.map(({ k }) => k));
    }
    // kept, 20,000 texts of up to 165 bytes would hold megabytes of the library's Lua memory
    expect((await functionsMemory()) - before).toBeLessThan(1_000_000);
  });
});

describe('a failed batch', () => {
  let server: ChildProcess | undefined;
  let port = 0;

  beforeAll(async () => {
    port = await freePort();
    server = await startOwnRedis(port);
  });
  afterAll(() => {
    if (server && server.exitCode === null) server.kill('SIGKILL');
  });

  const spec = { algorithm: 'token-bucket', capacity: 100, refill: 1, periodMs: 1_000, maxDebt: 0 } as const;
  const request = (i: number): LimitCheck[] => [{ key: limitKey('', 'fail', '', `c${i}`), spec, cost: 1 }];

  /** What each promise ended with, or 'pending' if it had not within 3 s. */
  const settleAll = (promises: Promise<unknown>[]) =>
    Promise.all(
      promises.map((p) =>
        Promise.race([
          p.then(
            () => 'resolved',
            (error: unknown) => (error instanceof StoreError ? 'StoreError' : String(error)),
          ),
          sleep(3_000).then(() => 'pending'),
        ]),
      ),
    );

  it('closing the client under a batch in flight: every caller gets a StoreError, none hangs', async () => {
    const store = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 1_000 });
    const control = new Redis({ port });
    try {
      await store.ready();
      expect((await store.acquire(request(0))).allowed).toBe(true); // the script is loaded
      await control.client('PAUSE', 800, 'ALL'); // the batch sits in Redis unanswered
      const asked = Array.from({ length: 100 }, (_, i) => store.acquire(request(i)));
      await sleep(50);
      store.client.disconnect();
      expect(new Set(await settleAll(asked))).toEqual(new Set(['StoreError']));
    } finally {
      await sleep(800);
      control.disconnect();
      await store.close();
    }
  });

  it('Redis SIGKILLed under a batch in flight: every caller gets a StoreError, none hangs', async () => {
    const store = new RedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 1_000 });
    const control = new Redis({ port });
    control.on('error', () => {});
    try {
      await store.ready();
      expect((await store.acquire(request(0))).allowed).toBe(true);
      await control.client('PAUSE', 2_000, 'ALL');
      const asked = Array.from({ length: 100 }, (_, i) => store.acquire(request(i)));
      await sleep(50);
      const exited = new Promise((resolve) => server!.once('exit', resolve));
      server!.kill('SIGKILL');
      await exited;
      expect(new Set(await settleAll(asked))).toEqual(new Set(['StoreError']));
    } finally {
      control.disconnect();
      await store.close();
    }
  });
});
