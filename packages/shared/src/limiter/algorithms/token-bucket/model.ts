/**
 * The token bucket of rule format v1 and of `"algorithm": "token-bucket"` limits, in pure
 * TypeScript with the clock passed in.
 *
 * `token-bucket.lua` is the twin of this file (its hot steps written out inline): the same IEEE-754
 * double operations in the same order, so both stores give bit-identical answers for the same inputs
 * (the differential test against Redis checks this). Change one, change the other.
 *
 * A bucket's balance `b` starts at `capacity`, gains `refill` tokens every `periodMs`, continuously,
 * up to `capacity`, and may be negative. A request of cost `c` is admitted iff `b ≥ min(c, 1)` and
 * `b − c ≥ −maxDebt`; then `b ← b − c`; a denied request changes nothing.
 *
 * Float care:
 * - refill is `elapsedMs · refill / periodMs`, one rounding after an exact product in practice, never
 *   `elapsedMs · (refill / periodMs)`: the rate `1 / 3_600_000` rounds down, so a whole hour refilled
 *   0.9999999999999999 of a token and a just-emptied 1-per-hour bucket reported `t=3601`;
 * - a clock that goes backwards counts as no elapsed time, and the bucket keeps its later
 *   timestamp, so the same span of time is never credited twice;
 * - `retryAfterMs` and `resetMs` (until full) are whole ms found with the deciding expression itself
 *   (see `waitMs`), capped at `MAX_WAIT_MS` (tiny refill rates, or a rate that underflows to 0).
 *
 * Edits (state-tag.ts): the state records `T<capacity>/<refill>/<periodMs>`. Tokens mean the same under
 * any numbers, so an edited bucket keeps its balance (capped at the new capacity, as always), except
 * that a debt deeper than the new `maxDebt` is forgiven down to it: no wait is ever longer than the new
 * numbers allow. `maxDebt` is not in the tag: a lease takes from the same bucket with `maxDebt` 0.
 * A settlement computed for other numbers is dropped.
 */
import type { Settlement } from '../../limits.js';
import {
  type AlgorithmModel,
  assertPositive,
  type Evaluation,
  LimitArgumentError,
  type Settled,
  type Verdict,
} from '../algorithm.js';
import type { GrantRefund } from '../refund-ledger.js';
import { DROPPED, perSpec } from '../state-tag.js';
import { waitMs } from '../wait.js';

/** A token bucket whose balance may go negative, so that a large request is paid back by waiting. */
export interface TokenBucketSpec {
  readonly algorithm: 'token-bucket';
  /** most tokens the bucket holds (the burst); > 0 */
  readonly capacity: number;
  /** tokens gained every `periodMs`, continuously; > 0 */
  readonly refill: number;
  /** refill period in milliseconds; > 0 */
  readonly periodMs: number;
  /** how far below zero one admitted request may take the balance; >= 0 */
  readonly maxDebt: number;
}

/** The numbers of a token bucket (a `TokenBucketSpec` without its algorithm name). */
export type BucketLimits = Omit<TokenBucketSpec, 'algorithm'>;

/**
 * What a store keeps per bucket; in Redis the string `"<balance> <updatedAtMs> <tag>"` ('%.17g' each,
 * then the tag).
 */
export interface BucketState {
  /** tokens, may be negative (down to `-maxDebt`) */
  readonly balance: number;
  /** the store's clock when `balance` was last brought up to date, in milliseconds */
  readonly updatedAtMs: number;
  /** the numbers it was written under, `bucketTag` (absent: written before tags, by an older Sluice) */
  readonly tag?: string;
}

/** `T<capacity>/<refill>/<periodMs>`: what a bucket's state records of its limit (state-tag.ts). */
export const bucketTag: (limits: BucketLimits) => string = perSpec(
  (limits) => `T${limits.capacity}/${limits.refill}/${limits.periodMs}`,
);

/** Tokens gained per millisecond (only ever a search's starting guess; refill itself never uses it). */
export function refillRatePerMs(limits: BucketLimits): number {
  return limits.refill / limits.periodMs;
}

/**
 * Whether a request of this cost can ever be admitted: a full bucket admits it. False only when
 * `cost > capacity + maxDebt`, or `capacity < 1` with `cost ≥ 1` (the bucket never holds a whole token).
 */
export function canEverAdmit(limits: BucketLimits, cost: number): boolean {
  return admits(limits.capacity, cost, limits.maxDebt);
}

/** The balance of `state` brought up to `atMs`: continuous refill, capped at capacity. */
export function balanceAt(state: BucketState, limits: BucketLimits, atMs: number): number {
  return refilled(state.balance, state.updatedAtMs, limits, atMs);
}

/** Whole ms for an empty bucket (balance 0) to be full again, by the same arithmetic as `resetMs`. */
export function capacityRefillMs(limits: BucketLimits): number {
  return untilFullMs(0, 0, limits, 0);
}

/** Throws `LimitArgumentError` unless the limits and cost are finite and in range. */
export function assertBucketArguments(limits: BucketLimits, cost: number): void {
  assertPositive('capacity', limits.capacity);
  assertPositive('refill', limits.refill);
  assertPositive('periodMs', limits.periodMs);
  assertPositive('maxDebt', limits.maxDebt, true);
  assertPositive('cost', cost);
}

/** The decision arithmetic of the plug-in (index.ts). */
export const tokenBucketModel: AlgorithmModel<TokenBucketSpec, BucketState> = {
  name: 'token-bucket',
  assertArguments: assertBucketArguments,
  luaArguments: (spec) => [
    String(spec.capacity),
    String(spec.refill),
    String(spec.periodMs),
    String(spec.maxDebt),
    bucketTag(spec),
  ],
  evaluate: evaluateBucket,
  settle: settleBucket,
};

/**
 * docs/lifecycle.md: the balance brought up to `nowMs`, then charged `delta` on top (which may take it below
 * -maxDebt: the client waits longer) or given `-delta` back, never above capacity.
 */
export function settleBucket(
  state: unknown,
  settlement: Settlement & { readonly spec: BucketLimits },
  nowMs: number,
  refund?: GrantRefund,
): Settled<BucketState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const limits = settlement.spec;
  const tag = bucketTag(limits);
  // a state of other numbers, or of another algorithm: the settlement was computed for an older version
  if (state !== undefined && !(isBucketState(state) && state.tag === tag)) return DROPPED;
  // a refund gives back what refund.max leaves of this period
  const delta = refund === undefined ? settlement.delta : -refund(-settlement.delta, limits.periodMs);
  const current = isBucketState(state) ? state : { balance: limits.capacity, updatedAtMs: nowMs };
  const b = refilled(current.balance, current.updatedAtMs, limits, nowMs);
  const next: BucketState = {
    balance: Math.min(b - delta, limits.capacity),
    updatedAtMs: Math.max(nowMs, current.updatedAtMs),
    tag,
  };
  const resetMs = untilFullMs(next.balance, next.updatedAtMs, limits, nowMs);
  return { level: next.balance, resetMs, state: next, ttlMs: resetMs };
}

/**
 * Evaluates one request of `cost` tokens at `nowMs` (the store's clock). A missing state (expired =
 * was full) is a full bucket. When the request can never be admitted (see `canEverAdmit`), its
 * `retryAfterMs` is the time until the bucket is full: the best a client can do, and it keeps a
 * steady stream of such requests from being told "retry now".
 */
export function evaluateBucket(
  state: unknown,
  limits: BucketLimits,
  cost: number,
  nowMs: number,
): Evaluation<BucketState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const { capacity, maxDebt } = limits;
  const tag = bucketTag(limits);
  const current = currentState(state, limits, tag, nowMs);
  const b = refilled(current.balance, current.updatedAtMs, limits, nowMs);
  const allowed = admits(b, cost, maxDebt);
  return {
    allowed,
    hold(): Verdict {
      const resetMs = untilFullMs(current.balance, current.updatedAtMs, limits, nowMs);
      let retryAfterMs = 0;
      if (!allowed) {
        retryAfterMs = resetMs; // never admissible: cost > capacity + maxDebt, or capacity < 1 <= cost
        if (admits(capacity, cost, maxDebt)) {
          const needed = Math.max(Math.min(cost, 1), cost - maxDebt);
          const rate = refillRatePerMs(limits);
          retryAfterMs = waitMs(
            (x) => admits(refilled(current.balance, current.updatedAtMs, limits, nowMs + x), cost, maxDebt),
            (needed - b) / rate,
          );
        }
      }
      return { allowed, level: b, retryAfterMs, resetMs };
    },
    charge() {
      if (!allowed) throw new LimitArgumentError('charge() of a request this bucket denies');
      const next: BucketState = { balance: b - cost, updatedAtMs: Math.max(nowMs, current.updatedAtMs), tag };
      const resetMs = untilFullMs(next.balance, next.updatedAtMs, limits, nowMs);
      return {
        verdict: { allowed, level: next.balance, retryAfterMs: 0, resetMs },
        state: next,
        ttlMs: resetMs,
      };
    },
  };
}

/**
 * The state a decision starts from: none is a full bucket; one written under other numbers (an edit)
 * keeps its balance but owes at most the new `maxDebt`.
 */
function currentState(state: unknown, limits: BucketLimits, tag: string, nowMs: number): BucketState {
  if (!isBucketState(state)) return { balance: limits.capacity, updatedAtMs: nowMs };
  if (state.tag === tag || state.balance >= -limits.maxDebt) return state;
  return { balance: -limits.maxDebt, updatedAtMs: state.updatedAtMs };
}

/** docs/limits.md: admitted iff `b ≥ min(c, 1)` and `b − c ≥ −maxDebt`. */
function admits(balance: number, cost: number, maxDebt: number): boolean {
  return balance >= Math.min(cost, 1) && balance - cost >= -maxDebt;
}

function refilled(balance: number, updatedAtMs: number, limits: BucketLimits, atMs: number): number {
  let elapsedMs = atMs - updatedAtMs;
  if (!(elapsedMs > 0)) elapsedMs = 0;
  return Math.min(balance + (elapsedMs * limits.refill) / limits.periodMs, limits.capacity);
}

function untilFullMs(balance: number, updatedAtMs: number, limits: BucketLimits, nowMs: number): number {
  const { capacity } = limits;
  return waitMs(
    (x) => refilled(balance, updatedAtMs, limits, nowMs + x) >= capacity,
    (capacity - refilled(balance, updatedAtMs, limits, nowMs)) / refillRatePerMs(limits),
  );
}

function isBucketState(state: unknown): state is BucketState {
  return (
    typeof state === 'object' &&
    state !== null &&
    typeof (state as BucketState).balance === 'number' &&
    typeof (state as BucketState).updatedAtMs === 'number' &&
    ((state as BucketState).tag === undefined || (state as BucketState).tag!.startsWith('T'))
  );
}
