/**
 * What a cached denial says later, per algorithm: never more room than the store would show (other
 * traffic could only have charged the limits), every wait counting down.
 */
import { describe, expect, it } from 'vitest';
import type { LimitCheck, LimitOutcome, LimitSpec } from '../limits.js';
import { MemoryStore } from '../memory-store.js';
import { peekOutcomes } from '../peek.js';
import { carryDenialForward, carryForward } from './carry-forward.js';

/** The denial a store gives for `checks` now, and `elapsedMs` later with no traffic in between. */
async function denialAndLater(checks: LimitCheck[], elapsedMs: number) {
  const clock = { nowMs: 1_700_000_000_000 };
  const store = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
  let denial = await store.acquire(checks);
  while (denial.allowed) denial = await store.acquire(checks);
  clock.nowMs += elapsedMs;
  const { states, nowMs } = store.peekStates(checks.map((check) => check.key));
  const later = peekOutcomes(checks, states, nowMs);
  await store.close();
  return { denial, later };
}

const bucket: LimitSpec = { algorithm: 'token-bucket', capacity: 10, refill: 1, periodMs: 1_000, maxDebt: 0 };
const window: LimitSpec = { algorithm: 'sliding-window', max: 4, windowMs: 60_000 };
const slots: LimitSpec = { algorithm: 'concurrency', max: 2, leaseMs: 30_000 };

describe('carryForward', () => {
  it('a token bucket: the balance refilled, exactly as the store has it, waits shortened', async () => {
    const { denial, later } = await denialAndLater([{ key: 'b', spec: bucket, cost: 1 }], 2_500);
    const carried = carryForward(denial.limits[0]!, bucket, 2_500);
    // still the denial it was (the cache answers it until the store's wait is over)
    expect(carried).toEqual({ ...later[0], allowed: false });
    expect(carried).toMatchObject({ level: 2.5, remaining: 2, retryAfterMs: 0, resetMs: 7_500 });
  });

  it('a sliding window: the estimate kept (it can only have fallen, so r errs low), waits shortened', async () => {
    const { denial, later } = await denialAndLater([{ key: 'w', spec: window, cost: 1 }], 1_000);
    const outcome = denial.limits[0]!;
    const carried = carryForward(outcome, window, 1_000);
    expect(carried).toEqual({
      ...outcome,
      retryAfterMs: outcome.retryAfterMs - 1_000,
      resetMs: outcome.resetMs - 1_000,
    });
    expect(carried.level).toBeGreaterThanOrEqual(later[0]!.level);
    expect(carried.remaining).toBeLessThanOrEqual(later[0]!.remaining);
  });

  it('a concurrency limit: the slots held stay held, its wait counts down to 0 and no further', () => {
    const denied: LimitOutcome = { allowed: false, level: 2, remaining: 0, retryAfterMs: 1_000, resetMs: 0 };
    expect(carryForward(denied, slots, 400)).toEqual({ ...denied, retryAfterMs: 600 });
    expect(carryForward(denied, slots, 5_000)).toEqual({ ...denied, retryAfterMs: 0 });
  });

  it('a stacked denial: each limit carried forward by its own plug-in, the wait shortened', async () => {
    const checks: LimitCheck[] = [
      { key: 'b2', spec: bucket, cost: 1 },
      { key: 'w2', spec: { ...window, max: 100 }, cost: 1 },
    ];
    const { denial } = await denialAndLater(checks, 0);
    const carried = carryDenialForward(
      denial,
      checks.map((check) => check.spec),
      500,
    );
    expect(carried).toMatchObject({
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: denial.retryAfterMs - 500,
    });
    expect(carried.limits[0]!.level).toBe(denial.limits[0]!.level + 0.5);
    expect(carried.limits[1]!.level).toBe(denial.limits[1]!.level);
  });
});
