/**
 * `GET /usage` at the shared level, on the in-process store: where a client stands against each kind
 * of limit, read without charging, with checks keyed the way the gateway stores them
 * (`limitKeyName`: a concurrency limit's slots live under `<name>:slots`).
 */
import { describe, expect, it } from 'vitest';
import { limitKeyName } from './algorithms/index.js';
import {
  type ConcurrencySpec,
  type LimitCheck,
  type LimitSpec,
  limitKey,
  type SlidingWindowSpec,
  type TokenBucketSpec,
} from './limits.js';
import { MemoryStore } from './memory-store.js';
import { peekOutcomes, usageOf } from './peek.js';

const START_MS = 1_700_000_000_000;

/** A store on a clock the test moves by hand. */
function storeAt(startMs = START_MS) {
  const clock = { nowMs: startMs };
  const store = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
  return { clock, store };
}

/** The check usage builds for limit `name` of rule `rule-1` for client `ip:10.0.0.1`. */
function checkOf(name: string, spec: LimitSpec, cost = 1): LimitCheck {
  return { key: limitKey('', 'rule-1', limitKeyName(spec, name), 'ip:10.0.0.1'), spec, cost };
}

/** Usage now, as the gateway's route reads it from the in-process store. */
function usageNow(store: MemoryStore, checks: readonly LimitCheck[]) {
  const { states, nowMs } = store.peekStates(checks.map((check) => check.key));
  return peekOutcomes(checks, states, nowMs).map((outcome, i) => usageOf(checks[i]!.spec, outcome));
}

const bucket: TokenBucketSpec = {
  algorithm: 'token-bucket',
  capacity: 10,
  refill: 1,
  periodMs: 1_000,
  maxDebt: 10,
};
const window: SlidingWindowSpec = { algorithm: 'sliding-window', max: 10, windowMs: 60_000 };
const slots: ConcurrencySpec = { algorithm: 'concurrency', max: 5, leaseMs: 35_000 };

describe('usage of each algorithm', () => {
  it('a token bucket: tokens left, how far below zero, seconds until full', async () => {
    const { store } = storeAt();
    const check = checkOf('burst', bucket);
    expect(usageNow(store, [check])).toEqual([{ remaining: 10, debt: 0, inFlight: 0, fullInSeconds: 0 }]);
    await store.acquire([{ ...check, cost: 15 }]);
    expect(usageNow(store, [check])).toEqual([{ remaining: 0, debt: 5, inFlight: 0, fullInSeconds: 15 }]);
  });

  it('a sliding window: units left below max, seconds until the estimate is 0', async () => {
    const { clock, store } = storeAt(START_MS - (START_MS % 60_000)); // the start of a window
    const check = checkOf('daily', window);
    expect(usageNow(store, [check])).toEqual([{ remaining: 10, debt: 0, inFlight: 0, fullInSeconds: 0 }]);
    await store.acquire([{ ...check, cost: 3 }]);
    clock.nowMs += 30_000;
    // 3 counted in this window, two windows until nothing of them counts
    expect(usageNow(store, [check])).toEqual([{ remaining: 7, debt: 0, inFlight: 0, fullInSeconds: 90 }]);
  });

  it('a concurrency limit with 2 slots held: 3 free and 2 in flight, until they are given back or expire', async () => {
    const { clock, store } = storeAt();
    const check = checkOf('inflight', slots);
    expect(check.key).toBe('{rule-1:ip:10.0.0.1}:inflight:slots');
    await store.acquire([{ ...check, leaseId: 'a' }]);
    await store.acquire([{ ...check, leaseId: 'b' }]);
    expect(usageNow(store, [check])).toEqual([{ remaining: 3, debt: 0, inFlight: 2, fullInSeconds: 0 }]);
    await store.settle([{ key: check.key, spec: slots, delta: 0, admittedAtMs: clock.nowMs, leaseId: 'a' }]);
    expect(usageNow(store, [check])[0]).toMatchObject({ remaining: 4, inFlight: 1 });
    clock.nowMs += slots.leaseMs;
    expect(usageNow(store, [check])[0]).toMatchObject({ remaining: 5, inFlight: 0 });
  });

  it('reads every limit of a stacked rule at once, charging nothing', async () => {
    const { store } = storeAt();
    const checks = [checkOf('burst', bucket), checkOf('daily', window), checkOf('inflight', slots)];
    await store.acquire(checks.map((check) => ({ ...check, leaseId: 'x' })));
    const once = usageNow(store, checks);
    expect(once.map((usage) => [usage.remaining, usage.inFlight])).toEqual([
      [9, 0],
      [9, 0],
      [4, 1],
    ]);
    expect(usageNow(store, checks)).toEqual(once);
  });
});
