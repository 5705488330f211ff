/**
 * fast-check generators shared by the bucket, memory-store and Redis differential tests:
 * limits, costs (fractional, unit, above capacity + maxDebt) and clock steps (0, sub-ms, large).
 */
import fc from 'fast-check';
import type { BucketLimits } from './store.js';

export const limitsArb: fc.Arbitrary<BucketLimits> = fc
  .record({
    capacity: fc.oneof(
      fc.constantFrom(0.5, 1, 2, 10, 100, 1e9),
      fc.double({ min: 0.01, max: 1e6, noNaN: true }),
    ),
    refill: fc.oneof(fc.constantFrom(1, 10, 100), fc.double({ min: 1e-3, max: 1e6, noNaN: true })),
    periodMs: fc.oneof(
      fc.constantFrom(1, 500, 1_000, 60_000, 3_600_000, 86_400_000),
      fc.integer({ min: 1, max: 10_000_000 }),
      fc.double({ min: 0.5, max: 1e7, noNaN: true }),
    ),
    debt: fc.oneof(fc.constant(-1), fc.constant(0), fc.double({ min: 0, max: 1e6, noNaN: true })),
  })
  // debt -1 means the API default: maxDebt = capacity
  .map(({ capacity, refill, periodMs, debt }) => ({
    capacity,
    refill,
    periodMs,
    maxDebt: debt < 0 ? capacity : debt,
  }));

/** A cost relative to the limits: unit, tiny, fractional, up to past capacity + maxDebt. */
export function costArb(limits: BucketLimits): fc.Arbitrary<number> {
  const top = limits.capacity + limits.maxDebt;
  return fc.oneof(
    fc.constant(1),
    fc.constantFrom(0.25, 0.5, 2, 8),
    fc.double({ min: 1e-3, max: 1, noNaN: true }),
    fc.double({ min: 1e-3, max: 1.1, noNaN: true }).map((f) => Math.max(f * top, 1e-9)),
  );
}

/**
 * A step of the store's clock in ms, forward only: 0, sub-ms, whole ms, a fraction of the time
 * the bucket takes to refill (so buckets spend time both drained and refilling), or up to a year.
 */
export function stepMsArb(limits: BucketLimits): fc.Arbitrary<number> {
  const refillMs = (limits.capacity * limits.periodMs) / limits.refill;
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 2, arbitrary: fc.double({ min: 0, max: 5, noNaN: true }) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: 5_000 }) },
    { weight: 4, arbitrary: fc.double({ min: 0, max: 0.6, noNaN: true }).map((f) => f * refillMs) },
    { weight: 1, arbitrary: fc.double({ min: 0, max: 3e10, noNaN: true }) },
  );
}

/** Where the clock starts: 0, or a Redis-like epoch in ms with a microsecond fraction. */
export const startMsArb: fc.Arbitrary<number> = fc.oneof(
  fc.constant(0),
  fc
    .integer({ min: 1_600_000_000_000, max: 2_000_000_000_000 })
    .chain((s) => fc.integer({ min: 0, max: 999 }).map((us) => s + us / 1000)),
);

export interface Operation {
  stepMs: number;
  cost: number;
}

export interface Scenario {
  limits: BucketLimits;
  startMs: number;
  ops: Operation[];
}

export function scenarioArb(maxOps = 60): fc.Arbitrary<Scenario> {
  return limitsArb.chain((limits) =>
    fc.record({
      limits: fc.constant(limits),
      startMs: startMsArb,
      ops: fc.array(fc.record({ stepMs: stepMsArb(limits), cost: costArb(limits) }), {
        minLength: 1,
        maxLength: maxOps,
        size: 'max',
      }),
    }),
  );
}
