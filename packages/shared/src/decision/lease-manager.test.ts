/**
 * Lease mode against the exact bucket: several simulated gateways (one LeaseManager each) over ONE
 * in-process store on a simulated clock, random request timings, bursts that interleave lease fetches,
 * and leases that end by expiry, by running out, or at close.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { leaseRequestsOf } from '../limiter/algorithms/lease.js';
import type { LimitCheck, Settlement, StoreDecision, TokenBucketSpec } from '../limiter/limits.js';
import { MemoryStore } from '../limiter/memory-store.js';
import { LeaseManager, type LeaseStore } from './lease-manager.js';

/** A simulated clock with timers that fire as it moves. */
class SimClock {
  nowMs = 0;
  #timers: { atMs: number; fn: () => void; cancelled: boolean }[] = [];
  schedule = (fn: () => void, ms: number) => {
    const timer = { atMs: this.nowMs + ms, fn, cancelled: false };
    this.#timers.push(timer);
    return () => {
      timer.cancelled = true;
    };
  };
  /** Moves to `toMs`, firing due timers in time order (each at its own time). */
  async advance(toMs: number): Promise<void> {
    for (;;) {
      this.#timers = this.#timers.filter((timer) => !timer.cancelled);
      this.#timers.sort((a, b) => a.atMs - b.atMs);
      const next = this.#timers[0];
      if (next === undefined || next.atMs > toMs) break;
      this.#timers.shift();
      this.nowMs = Math.max(this.nowMs, next.atMs);
      next.fn();
      await flush();
    }
    this.nowMs = toMs;
  }
}

async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** The store as a gateway sees it, counting every token taken and given back. */
function countingStore(memory: MemoryStore) {
  const totals = { taken: 0, givenBack: 0, calls: 0 };
  const store: LeaseStore = {
    async acquire(checks: readonly LimitCheck[]) {
      totals.calls++;
      const decision = await memory.acquire(checks);
      if (decision.allowed) totals.taken += checks[0]!.cost;
      return { kind: 'store', decision };
    },
    async settle(_by, settlements: readonly Settlement[]) {
      totals.calls++;
      totals.givenBack -= settlements[0]!.delta;
      return memory.settle(settlements);
    },
  };
  return { store, totals };
}

const scenario = fc.record({
  gateways: fc.integer({ min: 1, max: 4 }),
  capacity: fc.integer({ min: 8, max: 60 }),
  ratePerMs: fc.double({ min: 0.001, max: 0.5, noNaN: true }),
  maxDebt: fc.constantFrom(0, 5),
  cost: fc.constantFrom(1, 2),
  leaseMs: fc.integer({ min: 5, max: 100 }),
  steps: fc.array(
    fc.record({
      dtMs: fc.integer({ min: 0, max: 60 }),
      // a burst: requests issued together, so lease fetches interleave
      requests: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 6 }),
    }),
    { minLength: 1, maxLength: 40 },
  ),
});

describe('LeaseManager over one store, several gateways (property)', () => {
  it('never admits more than exact mode could, conserves every leased token, and holds none after close', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const clock = new SimClock();
        const memory = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
        const { store, totals } = countingStore(memory);
        const spec: TokenBucketSpec = {
          algorithm: 'token-bucket',
          capacity: s.capacity,
          refill: s.ratePerMs * 1000,
          periodMs: 1000,
          maxDebt: s.maxDebt,
        };
        const checks: LimitCheck[] = [{ key: 'k', spec, cost: s.cost }];
        const maxRequests = leaseRequestsOf([{ spec, cost: s.cost }]);
        const managers = Array.from(
          { length: s.gateways },
          () =>
            new LeaseManager({
              store,
              leaseMs: s.leaseMs,
              now: () => clock.nowMs,
              schedule: clock.schedule,
            }),
        );
        const admissions: { atMs: number; tokens: number; heldBefore: number }[] = [];
        let exactAdmitted = 0;
        let t = 0;
        for (const step of s.steps) {
          t += step.dtMs;
          await clock.advance(t);
          const pending: Promise<void>[] = [];
          const heldBefore = managers.reduce((sum, m) => sum + m.outstandingTokens, 0);
          for (const g of step.requests) {
            const manager = managers[g % s.gateways]!;
            const atMs = clock.nowMs;
            const decide = async () => {
              let decision: StoreDecision | undefined = await manager.take('k', checks, maxRequests);
              if (decision === undefined) {
                const answer = await store.acquire(checks);
                if (answer.kind !== 'store') throw new Error(`the store answered ${answer.kind}`);
                decision = answer.decision;
                if (decision.allowed) exactAdmitted += s.cost;
              }
              if (decision.allowed) admissions.push({ atMs, tokens: s.cost, heldBefore: heldBefore });
            };
            pending.push(decide());
          }
          await Promise.all(pending);
          const held = managers.reduce((sum, m) => sum + m.outstandingTokens, 0);
          expect(held).toBeLessThanOrEqual(s.gateways * (s.capacity / 4));
        }
        await Promise.all(managers.map((manager) => manager.close()));

        // exact mode's bound from the start (the bucket starts full): never exceeded
        const ratePerMs = s.ratePerMs;
        let cumulative = 0;
        for (const admission of admissions) {
          cumulative += admission.tokens;
          expect(cumulative).toBeLessThanOrEqual(s.capacity + s.maxDebt + ratePerMs * admission.atMs + 1e-9);
        }
        // any span: what was admitted in it was taken in it, or held in a lease when it began
        for (let i = 0; i < admissions.length; i++) {
          let inSpan = 0;
          for (let j = i; j < admissions.length; j++) {
            inSpan += admissions[j]!.tokens;
            const spanMs = admissions[j]!.atMs - admissions[i]!.atMs;
            expect(inSpan).toBeLessThanOrEqual(
              s.capacity + s.maxDebt + ratePerMs * spanMs + admissions[i]!.heldBefore + 1e-9,
            );
          }
        }
        // conservation: every token taken from the bucket was admitted or given back
        const admitted = admissions.reduce((sum, a) => sum + a.tokens, 0);
        expect(totals.taken - totals.givenBack).toBeCloseTo(admitted, 9);
        for (const manager of managers) {
          expect(manager.outstandingTokens).toBe(0);
          const st = manager.stats;
          expect(st.leasedTokens).toBe(st.admittedTokens + st.returnedTokens + st.lostTokens);
          expect(st.lostTokens).toBe(0);
        }
        const leaseAdmitted = managers.reduce((sum, m) => sum + m.stats.admittedTokens, 0);
        expect(leaseAdmitted + exactAdmitted).toBe(admitted);
        await memory.close();
      }),
      { numRuns: 150 },
    );
  });
});

describe('LeaseManager', () => {
  const spec: TokenBucketSpec = {
    algorithm: 'token-bucket',
    capacity: 1000,
    refill: 1,
    periodMs: 1000,
    maxDebt: 0,
  };
  const checks: LimitCheck[] = [{ key: 'k', spec, cost: 1 }];

  it('sizes leases from the key’s rate: a steady stream costs far fewer store calls than requests', async () => {
    const clock = new SimClock();
    const memory = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
    const { store, totals } = countingStore(memory);
    const manager = new LeaseManager({
      store,
      leaseMs: 100,
      now: () => clock.nowMs,
      schedule: clock.schedule,
    });
    let admitted = 0;
    for (let i = 0; i < 500; i++) {
      await clock.advance(i); // 1 request per ms
      const decision = await manager.take('k', checks, leaseRequestsOf([{ spec, cost: 1 }]));
      if (decision?.allowed) admitted++;
    }
    await manager.close();
    expect(admitted).toBe(500);
    expect(totals.calls / 500).toBeLessThan(0.1);
    expect(manager.stats.returnedTokens + manager.stats.admittedTokens).toBe(manager.stats.leasedTokens);
  });

  it('at the limit: denies from memory until a useful lease is there, then takes what accrued in one call', async () => {
    const clock = new SimClock();
    const memory = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
    // 8 tokens, one every 40 ms: a lease of LEASE_MS (100 ms) holds about 2 of them
    const small: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 8,
      refill: 1,
      periodMs: 40,
      maxDebt: 0,
    };
    const { store, totals } = countingStore(memory);
    await memory.acquire([{ key: 'k', spec: small, cost: 8 }]); // empty
    const manager = new LeaseManager({
      store,
      leaseMs: 100,
      now: () => clock.nowMs,
      schedule: clock.schedule,
    });
    const checks = [{ key: 'k', spec: small, cost: 1 }];
    const denial = await manager.take('k', checks, 2);
    expect(denial).toMatchObject({ allowed: false, deniedIndex: 0, retryAfterMs: 100 });
    expect(manager.stats.leaseDenials).toBe(1);
    // until then: answered from memory, no store call, the wait counting down
    const calls = totals.calls;
    for (const atMs of [10, 50, 99]) {
      await clock.advance(atMs);
      expect(manager.take('k', checks, 2)).toMatchObject({ allowed: false, retryAfterMs: 100 - atMs });
    }
    expect(totals.calls).toBe(calls);
    // 100 ms on: 2.5 tokens accrued, a lease of 2 in one call
    await clock.advance(100);
    expect(await manager.take('k', checks, 2)).toMatchObject({ allowed: true });
    expect(manager.take('k', checks, 2)).toMatchObject({ allowed: true });
    expect(totals.calls).toBe(calls + 1);
    expect(totals.taken).toBe(2);
    await manager.close();
  });

  it('at the limit of a slow bucket: waits for the first token, however long, answering from memory', async () => {
    const clock = new SimClock();
    const memory = new MemoryStore({ now: () => clock.nowMs, sweepIntervalMs: 0 });
    const hourly: TokenBucketSpec = {
      algorithm: 'token-bucket',
      capacity: 8,
      refill: 1,
      periodMs: 3_600_000,
      maxDebt: 0,
    };
    const { store, totals } = countingStore(memory);
    await memory.acquire([{ key: 'k', spec: hourly, cost: 8 }]);
    const manager = new LeaseManager({
      store,
      leaseMs: 100,
      now: () => clock.nowMs,
      schedule: clock.schedule,
    });
    const checks = [{ key: 'k', spec: hourly, cost: 1 }];
    expect(await manager.take('k', checks, 2)).toMatchObject({ allowed: false, retryAfterMs: 3_600_000 });
    const calls = totals.calls;
    await clock.advance(1_800_000);
    expect(manager.take('k', checks, 2)).toMatchObject({ allowed: false, retryAfterMs: 1_800_000 });
    expect(totals.calls).toBe(calls);
    await manager.close();
  });

  it('leases only rules whose limits are all token buckets, holding at most a quarter of capacity', () => {
    expect(leaseRequestsOf([{ spec, cost: 1 }])).toBe(250);
    expect(leaseRequestsOf([{ spec, cost: 3 }])).toBe(83);
    expect(leaseRequestsOf([{ spec: { ...spec, capacity: 4 }, cost: 1 }])).toBe(0);
    expect(
      leaseRequestsOf([
        { spec, cost: 1 },
        { spec: { algorithm: 'sliding-window', max: 100, windowMs: 1000 }, cost: 1 },
      ]),
    ).toBe(0);
  });
});
