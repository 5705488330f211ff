import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BucketArgumentError, type BucketState, decide, MAX_WAIT_MS } from './bucket.js';
import { MemoryStore } from './memory-store.js';
import { type BucketLimits, bucketKey, type Decision, type DecisionRequest } from './store.js';
import { scenarioArb } from './test-arbitraries.js';

const spec: BucketLimits = { capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 10 };
const request = (client: string, cost = 1, limits = spec): DecisionRequest => ({
  key: bucketKey('', 'rule-1', client),
  limits,
  cost,
});

/** A store on a clock the test moves by hand. */
function storeAt(startMs = 0, maxBuckets?: number) {
  const clock = { nowMs: startMs };
  const store = new MemoryStore({ now: () => clock.nowMs, maxBuckets, sweepIntervalMs: 0 });
  return { clock, store };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('MemoryStore', () => {
  it('follows the SPEC §2 example on its own clock', async () => {
    const { clock, store } = storeAt(1_000);
    expect(store.kind).toBe('memory');
    expect(await store.decide(request('a', 8))).toMatchObject({ allowed: true, balance: 2 });
    expect(await store.decide(request('a', 8))).toMatchObject({ allowed: true, balance: -6 });
    expect(await store.decide(request('a', 8))).toEqual({
      allowed: false,
      balance: -6,
      retryAfterMs: 7_000,
      fullInMs: 16_000,
    });
    clock.nowMs += 7_000;
    expect(await store.decide(request('a', 8))).toMatchObject({ allowed: true, balance: -7 });
    // another client has its own bucket
    expect(await store.decide(request('b', 8))).toMatchObject({ allowed: true, balance: 2 });
  });

  it('gives exactly the answers of bucket.ts, expiry included (random scenarios)', () => {
    let operations = 0;
    fc.assert(
      fc.property(scenarioArb(), ({ limits, startMs, ops }) => {
        const { clock, store } = storeAt(startMs, 8);
        let state: BucketState | undefined;
        for (const { stepMs, cost } of ops) {
          clock.nowMs += stepMs;
          const expected = decide(state, limits, cost, clock.nowMs);
          if (expected.changed) state = expected.decision.fullInMs === 0 ? undefined : expected.state;
          const actual: Decision = store.decideSync(request('x', cost, limits));
          if (!sameDecision(actual, expected.decision)) expect(actual).toEqual(expected.decision);
          operations++;
        }
      }),
      { numRuns: 2_000 },
    );
    expect(operations).toBeGreaterThan(20_000);
  });

  it('never holds more than maxBuckets buckets, evicting the least recently used', () => {
    const { store } = storeAt(0, 100);
    for (let i = 0; i < 1_000; i++) {
      store.decideSync(request(`client-${i}`, 5));
      expect(store.size).toBeLessThanOrEqual(100);
    }
    expect(store.size).toBe(100);
    // client-0 was evicted: it finds a full bucket again; client-999 is still half empty
    expect(store.decideSync(request('client-0', 5)).balance).toBe(5);
    expect(store.decideSync(request('client-999', 5)).balance).toBe(0);
  });

  it('drops a bucket once it would be full, and never keeps a full one', async () => {
    const { clock, store } = storeAt(0);
    const first = store.decideSync(request('idle', 4));
    expect(first.fullInMs).toBe(4_000);
    clock.nowMs = 3_999;
    expect(store.sweep()).toBe(0);
    expect(store.size).toBe(1);
    clock.nowMs = 4_000;
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(0);
    // a full bucket met before the sweep is dropped on access too
    store.decideSync(request('touched', 25 - 10));
    clock.nowMs = 100_000;
    expect(store.decideSync(request('touched', 25))).toMatchObject({
      allowed: false,
      balance: 10,
      fullInMs: 0,
    });
    expect(store.size).toBe(0);

    // denied on a new bucket (can never fit) or admitted but still full: nothing kept
    expect(store.decideSync(request('never', 25))).toMatchObject({ allowed: false, fullInMs: 0 });
    const huge = { capacity: 1e12, refill: 1, periodMs: 1, maxDebt: 0 };
    expect(store.decideSync(request('still-full', 1e-6, huge))).toMatchObject({ allowed: true, fullInMs: 0 });
    expect(store.size).toBe(0);
    await store.close();
  });

  it('keeps a bucket whose refill takes longer than MAX_WAIT_MS instead of expiring it early', () => {
    const { clock, store } = storeAt(1);
    const glacial = { capacity: 1e9, refill: 1e-3, periodMs: 60_000, maxDebt: 0 };
    expect(store.decideSync(request('glacial', 1e9 - 1, glacial))).toMatchObject({ fullInMs: MAX_WAIT_MS });
    clock.nowMs += 2 * MAX_WAIT_MS;
    expect(store.sweep()).toBe(0);
    // refilled by 2e15 ms × 1.7e-8 tokens/ms ≈ 3.3e7 tokens, not reset to a full 1e9
    expect(store.decideSync(request('glacial', 1, glacial)).balance).toBeLessThan(1e8);
  });

  it('sweeps full buckets on its own timer', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const clock = { nowMs: 0 };
    const store = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 60_000 });
    for (let i = 0; i < 50; i++) store.decideSync(request(`c${i}`, 1));
    expect(store.size).toBe(50);
    clock.nowMs = 1_001;
    vi.advanceTimersByTime(60_000);
    expect(store.size).toBe(0);
    await store.close();
  });

  it('rejects bad limits with a coded error, and uses a real clock by default', async () => {
    const store = new MemoryStore();
    await expect(store.decide(request('bad', 0))).rejects.toBeInstanceOf(BucketArgumentError);
    const decision = await store.decide(request('default-clock', 4));
    expect(decision).toMatchObject({ allowed: true, balance: 6, fullInMs: 4_000 });
    await store.close();
    expect(store.size).toBe(0);
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
