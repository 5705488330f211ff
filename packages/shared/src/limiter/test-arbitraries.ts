/**
 * fast-check generators shared by the algorithm, store and Redis differential tests: limits of each
 * algorithm, costs (fractional, unit, above what a limit can ever admit), clock steps (0, sub-ms,
 * large) and stacked checks.
 */
import fc from 'fast-check';
import type { BucketLimits } from './algorithms/token-bucket/model.js';
import type { LimitSpec, SlidingWindowSpec, TokenBucketSpec } from './limits.js';

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

export const bucketSpecArb: fc.Arbitrary<TokenBucketSpec> = limitsArb.map((limits) => ({
  algorithm: 'token-bucket' as const,
  ...limits,
}));

export const windowSpecArb: fc.Arbitrary<SlidingWindowSpec> = fc.record({
  algorithm: fc.constant('sliding-window' as const),
  max: fc.oneof(fc.constantFrom(1, 2, 5, 10, 100, 10_000), fc.double({ min: 0.01, max: 1e6, noNaN: true })),
  windowMs: fc.oneof(
    fc.constantFrom(1, 500, 1_000, 60_000, 3_600_000, 86_400_000),
    fc.integer({ min: 1, max: 10_000_000 }),
    fc.double({ min: 0.5, max: 1e7, noNaN: true }),
  ),
});

export const specArb: fc.Arbitrary<LimitSpec> = fc.oneof(bucketSpecArb, windowSpecArb);

/** How much a limit can take at most in one go (the scale costs are drawn on). */
function scaleOf(spec: LimitSpec): number {
  return spec.algorithm === 'token-bucket' ? spec.capacity + spec.maxDebt : spec.max;
}

/** Ms over which a concurrency limit's slots expire (only its clock steps use it). */
function leaseScaleMs(spec: LimitSpec): number {
  return spec.algorithm === 'concurrency' ? spec.leaseMs : 0;
}

/** Ms over which a limit recovers its whole quota (the scale clock steps are drawn on). */
function recoveryMsOf(spec: LimitSpec): number {
  if (spec.algorithm === 'concurrency') return leaseScaleMs(spec);
  return spec.algorithm === 'token-bucket'
    ? (spec.capacity * spec.periodMs) / spec.refill
    : 2 * spec.windowMs;
}

/** A cost relative to any limit: unit, tiny, fractional, up to past what it can ever admit. */
export function specCostArb(spec: LimitSpec): fc.Arbitrary<number> {
  const top = scaleOf(spec);
  return fc.oneof(
    fc.constant(1),
    fc.constantFrom(0.25, 0.5, 2, 8),
    fc.double({ min: 1e-3, max: 1, noNaN: true }),
    fc.double({ min: 1e-3, max: 1.1, noNaN: true }).map((f) => Math.max(f * top, 1e-9)),
  );
}

/** A forward clock step relative to how fast a limit recovers (see `stepMsArb`). */
export function specStepMsArb(spec: LimitSpec): fc.Arbitrary<number> {
  const recoveryMs = recoveryMsOf(spec);
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 2, arbitrary: fc.double({ min: 0, max: 5, noNaN: true }) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: 5_000 }) },
    { weight: 4, arbitrary: fc.double({ min: 0, max: 0.6, noNaN: true }).map((f) => f * recoveryMs) },
    { weight: 1, arbitrary: fc.double({ min: 0, max: 3e10, noNaN: true }) },
  );
}

export interface StackedOperation {
  stepMs: number;
  /** indexes into the scenario's limits, distinct, in the request's order */
  limits: number[];
  /** one cost per limit of the request */
  costs: number[];
}

export interface StackedScenario {
  specs: LimitSpec[];
  startMs: number;
  ops: StackedOperation[];
}

/**
 * Requests against random stacked limits: a pool of limits (some shared by many requests, like a
 * global cap beside per-client ones); each request takes 1–4 of them with a cost for each.
 * `backwards` lets a few steps move the clock back (the Redis differential tests cover that too).
 */
export function stackedScenarioArb(
  minOps: number,
  maxOps: number,
  options: { backwards?: boolean; spec?: fc.Arbitrary<LimitSpec>; maxStack?: number } = {},
): fc.Arbitrary<StackedScenario> {
  const maxStack = options.maxStack ?? 4;
  const backwardsArb = fc.double({ min: -5_000, max: 0, noNaN: true });
  return fc.array(options.spec ?? specArb, { minLength: 1, maxLength: 6 }).chain((specs) => {
    const opArb = fc
      .uniqueArray(fc.nat(specs.length - 1), { minLength: 1, maxLength: Math.min(maxStack, specs.length) })
      .chain((limits) =>
        fc.record({
          stepMs: options.backwards
            ? fc.oneof(
                { weight: 12, arbitrary: specStepMsArb(specs[limits[0]!]!) },
                { weight: 1, arbitrary: backwardsArb },
              )
            : specStepMsArb(specs[limits[0]!]!),
          limits: fc.constant(limits),
          costs: fc.tuple(...limits.map((i) => specCostArb(specs[i]!))),
        }),
      ) as fc.Arbitrary<StackedOperation>;
    return fc.record({
      specs: fc.constant(specs),
      startMs: startMsArb,
      ops: fc.array(opArb, { minLength: minOps, maxLength: maxOps, size: 'max' }),
    });
  });
}
