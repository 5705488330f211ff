import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LimitArgumentError } from './algorithms/algorithm.js';
import { MAX_WAIT_MS } from './algorithms/wait.js';
import { acquireFrom } from './engine.js';
import { type LimitCheck, type LimitSpec, limitKey, type TokenBucketSpec } from './limits.js';
import { MemoryStore } from './memory-store.js';
import { stackedScenarioArb } from './test-arbitraries.js';
import { checksOf, ReferenceTable, sameDecision } from './test-reference.js';

const spec: TokenBucketSpec = {
  algorithm: 'token-bucket',
  capacity: 10,
  refill: 1,
  periodMs: 1_000,
  maxDebt: 10,
};
const check = (client: string, cost = 1, limit: LimitSpec = spec): LimitCheck[] => [
  { key: limitKey('', 'rule-1', '', client), spec: limit, cost },
];

/** A store on a clock the test moves by hand. */
function storeAt(startMs = 0, maxKeys?: number) {
  const clock = { nowMs: startMs };
  const store = new MemoryStore({ now: () => clock.nowMs, maxKeys, sweepIntervalMs: 0 });
  return { clock, store };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('MemoryStore', () => {
  it('follows the documented debt example (docs/limits.md) on its own clock', async () => {
    const { clock, store } = storeAt(1_000);
    expect(store.kind).toBe('memory');
    expect((await store.acquire(check('a', 8))).limits[0]).toMatchObject({ allowed: true, level: 2 });
    expect((await store.acquire(check('a', 8))).limits[0]).toMatchObject({ allowed: true, level: -6 });
    expect(await store.acquire(check('a', 8))).toMatchObject({
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: 7_000,
      limits: [{ allowed: false, level: -6, remaining: 0, retryAfterMs: 7_000, resetMs: 16_000 }],
    });
    clock.nowMs += 7_000;
    expect((await store.acquire(check('a', 8))).limits[0]).toMatchObject({ allowed: true, level: -7 });
    // another client has its own bucket
    expect((await store.acquire(check('b', 8))).limits[0]).toMatchObject({ allowed: true, level: 2 });
  });

  it('gives exactly the answers of the engine, expiry on its own clock included (random stacked scenarios)', () => {
    let operations = 0;
    let run = 0;
    fc.assert(
      fc.property(stackedScenarioArb(1, 60), (scenario) => {
        const { clock, store } = storeAt(scenario.startMs, 64);
        const reference = new ReferenceTable();
        const runId = `m${++run}`;
        for (let i = 0; i < scenario.ops.length; i++) {
          clock.nowMs += scenario.ops[i]!.stepMs;
          const checks = checksOf(scenario, runId, i);
          const expected = acquireFrom(reference, checks, clock.nowMs);
          const actual = store.acquireSync(checks);
          if (!sameDecision(actual, expected)) expect(actual).toEqual(expected);
          operations++;
        }
      }),
      { numRuns: 1_000 },
    );
    expect(operations).toBeGreaterThan(10_000);
  });

  it('never holds more than maxKeys states, evicting the least recently used', () => {
    const { store } = storeAt(0, 100);
    for (let i = 0; i < 1_000; i++) {
      store.acquireSync(check(`client-${i}`, 5));
      expect(store.size).toBeLessThanOrEqual(100);
    }
    expect(store.size).toBe(100);
    // client-0 was evicted: it finds a full bucket again; client-999 is still half empty
    expect(store.acquireSync(check('client-0', 5)).limits[0]!.level).toBe(5);
    expect(store.acquireSync(check('client-999', 5)).limits[0]!.level).toBe(0);
  });

  it('drops a state once it no longer matters (full bucket, empty window), and never keeps one that does not', async () => {
    const { clock, store } = storeAt(0);
    expect(store.acquireSync(check('idle', 4)).limits[0]!.resetMs).toBe(4_000);
    const window: LimitSpec = { algorithm: 'sliding-window', max: 5, windowMs: 1_000 };
    expect(store.acquireSync(check('window', 1, window)).limits[0]!.resetMs).toBe(2_000);
    clock.nowMs = 3_999;
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(1);
    clock.nowMs = 4_000;
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(0);
    // a state that no longer matters, met before the sweep, is dropped on access too
    store.acquireSync(check('touched', 25 - 10));
    clock.nowMs = 100_000;
    expect(store.acquireSync(check('touched', 25)).limits[0]).toMatchObject({
      allowed: false,
      level: 10,
      resetMs: 0,
    });
    expect(store.size).toBe(0);

    // denied on a new bucket (can never fit) or admitted but still full: nothing kept
    expect(store.acquireSync(check('never', 25)).limits[0]).toMatchObject({ allowed: false, resetMs: 0 });
    const huge: LimitSpec = { algorithm: 'token-bucket', capacity: 1e12, refill: 1, periodMs: 1, maxDebt: 0 };
    expect(store.acquireSync(check('still-full', 1e-6, huge)).limits[0]).toMatchObject({
      allowed: true,
      resetMs: 0,
    });
    expect(store.size).toBe(0);
    await store.close();
  });

  it('a lone key whose state stopped mattering starts afresh when it is decided again, and counts once', () => {
    const { clock, store } = storeAt(0);
    for (let round = 0; round < 3; round++) {
      // every round takes the whole bucket and its debt, then waits until it is full again (its state is dropped)
      expect(store.acquireSync(check('lone', 20)).limits[0]).toMatchObject({ allowed: true, level: -10 });
      expect(store.size).toBe(1);
      expect(store.acquireSync(check('lone', 1)).limits[0]!.allowed).toBe(false);
      clock.nowMs += 100_000;
      expect(store.acquireSync(check('lone', 20)).limits[0]).toMatchObject({ allowed: true, level: -10 });
      clock.nowMs += 100_000;
    }
    expect(store.size).toBe(1);
    clock.nowMs += 100_000;
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(0);
  });

  it('keeps a bucket whose refill takes longer than MAX_WAIT_MS instead of expiring it early', () => {
    const { clock, store } = storeAt(1);
    const glacial: LimitSpec = {
      algorithm: 'token-bucket',
      capacity: 1e9,
      refill: 1e-3,
      periodMs: 60_000,
      maxDebt: 0,
    };
    expect(store.acquireSync(check('glacial', 1e9 - 1, glacial)).limits[0]).toMatchObject({
      resetMs: MAX_WAIT_MS,
    });
    clock.nowMs += 2 * MAX_WAIT_MS;
    expect(store.sweep()).toBe(0);
    // refilled by 2e15 ms × 1.7e-8 tokens/ms ≈ 3.3e7 tokens, not reset to a full 1e9
    expect(store.acquireSync(check('glacial', 1, glacial)).limits[0]!.level).toBeLessThan(1e8);
  });

  it('sweeps on its own timer', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const clock = { nowMs: 0 };
    const store = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 60_000 });
    for (let i = 0; i < 50; i++) store.acquireSync(check(`c${i}`, 1));
    expect(store.size).toBe(50);
    clock.nowMs = 1_001;
    vi.advanceTimersByTime(60_000);
    expect(store.size).toBe(0);
    await store.close();
  });

  it('rejects bad limits and repeated keys with a coded error, and uses a real clock by default', async () => {
    const store = new MemoryStore();
    await expect(store.acquire(check('bad', 0))).rejects.toBeInstanceOf(LimitArgumentError);
    await expect(store.acquire([...check('twice'), ...check('twice')])).rejects.toMatchObject({
      code: 'LIMIT_INVALID_ARGUMENT',
    });
    expect(await store.acquire([])).toMatchObject({
      allowed: true,
      limits: [],
      deniedIndex: -1,
      retryAfterMs: 0,
    });
    const decision = await store.acquire(check('default-clock', 4));
    expect(decision.limits[0]).toMatchObject({ allowed: true, level: 6, resetMs: 4_000 });
    await store.close();
    expect(store.size).toBe(0);
  });
});
