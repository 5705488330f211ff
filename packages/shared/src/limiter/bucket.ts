/**
 * The token bucket arithmetic of SPEC §2, in pure TypeScript with the clock passed in.
 *
 * `token-bucket.lua` is a line-by-line twin of this file: the same IEEE-754 double operations in
 * the same order, so both stores give bit-identical answers for the same inputs (the Redis
 * differential test checks this). Change one, change the other.
 *
 * Float care:
 * - a clock that goes backwards counts as no elapsed time, and the bucket keeps its later
 *   timestamp, so the same span of time is never credited twice;
 * - `retryAfterMs` and `fullInMs` are whole milliseconds found by searching with the very
 *   expression `decide` evaluates, so a retry at `now + retryAfterMs` is admitted and one at
 *   `now + (retryAfterMs - 1)` is denied, exactly, whatever the rounding;
 * - waits are capped at `MAX_WAIT_MS` (tiny refill rates, or a rate that underflows to 0).
 */
import type { BucketLimits, Decision } from './store.js';

/** What a store keeps per bucket. */
export interface BucketState {
  /** tokens, may be negative (down to `-maxDebt`) */
  balance: number;
  /** the store's clock when `balance` was last brought up to date, in milliseconds */
  updatedAtMs: number;
}

export interface BucketOutcome {
  decision: Decision;
  /** the bucket after the decision: unchanged (same object) when denied */
  state: BucketState;
  /**
   * true when the store must write `state` back (only on admission). A store then deletes the
   * bucket when `decision.fullInMs === 0`, keeps it for `decision.fullInMs` otherwise, and
   * without expiry when that is `MAX_WAIT_MS` (which only says "at least that long").
   */
  changed: boolean;
}

/**
 * Longest wait ever reported, in ms (~31,700 years): a wait of exactly this means "at least this
 * long" (absurdly slow refill, or a rate that underflows to 0). A store keeps such a bucket
 * without expiry rather than let it expire before it is full.
 */
export const MAX_WAIT_MS = 1e15;

export class BucketArgumentError extends RangeError {
  readonly code = 'BUCKET_INVALID_ARGUMENT';
}

/** Tokens gained per millisecond. */
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
  return refilled(state, limits.capacity, refillRatePerMs(limits), atMs);
}

/**
 * Decides one request of `cost` tokens at `nowMs` (the store's clock). `state` undefined is a new
 * (full) bucket. Pure: returns the decision and the state to store.
 *
 * When the request can never be admitted (see `canEverAdmit`), `retryAfterMs` is the time until
 * the bucket is full: the best a client can do, and it keeps a steady stream of such requests
 * from being told "retry now".
 */
export function decide(
  state: BucketState | undefined,
  limits: BucketLimits,
  cost: number,
  nowMs: number,
): BucketOutcome {
  assertBucketArguments(limits, cost, nowMs);
  const { capacity, maxDebt } = limits;
  const rate = refillRatePerMs(limits);
  const current = state ?? { balance: capacity, updatedAtMs: nowMs };
  const balance = refilled(current, capacity, rate, nowMs);

  if (admits(balance, cost, maxDebt)) {
    const next: BucketState = {
      balance: balance - cost,
      updatedAtMs: Math.max(nowMs, current.updatedAtMs),
    };
    const fullInMs = waitMs(next, capacity, rate, nowMs, capacity, (b) => b >= capacity);
    return {
      decision: { allowed: true, balance: next.balance, retryAfterMs: 0, fullInMs },
      state: next,
      changed: true,
    };
  }

  const fullInMs = waitMs(current, capacity, rate, nowMs, capacity, (b) => b >= capacity);
  const retryAfterMs = admits(capacity, cost, maxDebt)
    ? waitMs(current, capacity, rate, nowMs, neededBalance(cost, maxDebt), (b) => admits(b, cost, maxDebt))
    : fullInMs;
  return { decision: { allowed: false, balance, retryAfterMs, fullInMs }, state: current, changed: false };
}

/** SPEC §2: admitted iff `b ≥ min(c, 1)` and `b − c ≥ −maxDebt`. */
function admits(balance: number, cost: number, maxDebt: number): boolean {
  return balance >= Math.min(cost, 1) && balance - cost >= -maxDebt;
}

/** The balance at which `admits` starts to hold (used only to guess where the search starts). */
function neededBalance(cost: number, maxDebt: number): number {
  return Math.max(Math.min(cost, 1), cost - maxDebt);
}

function refilled(state: BucketState, capacity: number, ratePerMs: number, atMs: number): number {
  let elapsedMs = atMs - state.updatedAtMs;
  if (!(elapsedMs > 0)) elapsedMs = 0;
  const balance = state.balance + elapsedMs * ratePerMs;
  return Math.min(balance, capacity);
}

/**
 * The smallest whole number of ms `x` such that `holds(refilled(state, now + x))`, capped at
 * `MAX_WAIT_MS`. `holds` is monotone in time (every float step above is monotone), so a
 * bracket-and-bisect search is exact; it starts from the real-number estimate and usually
 * settles in two evaluations.
 */
function waitMs(
  state: BucketState,
  capacity: number,
  ratePerMs: number,
  nowMs: number,
  targetBalance: number,
  holds: (balance: number) => boolean,
): number {
  const at = (x: number) => holds(refilled(state, capacity, ratePerMs, nowMs + x));
  if (at(0)) return 0;
  const estimateMs = (targetBalance - refilled(state, capacity, ratePerMs, nowMs)) / ratePerMs;
  let x = estimateMs < MAX_WAIT_MS ? Math.ceil(estimateMs) : MAX_WAIT_MS;
  if (!(x >= 1)) x = 1;
  let lo: number; // `at(lo)` is false
  let hi: number; // `at(hi)` is true
  let step = 1;
  if (at(x)) {
    hi = x;
    lo = 0;
    while (hi - step > 0) {
      const candidate = hi - step;
      if (!at(candidate)) {
        lo = candidate;
        break;
      }
      hi = candidate;
      step *= 2;
    }
  } else {
    lo = x;
    for (;;) {
      const candidate = lo + step;
      if (candidate >= MAX_WAIT_MS) {
        if (!at(MAX_WAIT_MS)) return MAX_WAIT_MS;
        hi = MAX_WAIT_MS;
        break;
      }
      if (at(candidate)) {
        hi = candidate;
        break;
      }
      lo = candidate;
      step *= 2;
    }
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (at(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** Throws `BucketArgumentError` unless the limits, cost and clock are finite and in range. */
export function assertBucketArguments(limits: BucketLimits, cost: number, nowMs = 0): void {
  const { capacity, refill, periodMs, maxDebt } = limits;
  if (!(capacity > 0 && capacity < Infinity))
    throw new BucketArgumentError(`capacity must be > 0, got ${capacity}`);
  if (!(refill > 0 && refill < Infinity)) throw new BucketArgumentError(`refill must be > 0, got ${refill}`);
  if (!(periodMs > 0 && periodMs < Infinity))
    throw new BucketArgumentError(`periodMs must be > 0, got ${periodMs}`);
  if (!(maxDebt >= 0 && maxDebt < Infinity))
    throw new BucketArgumentError(`maxDebt must be >= 0, got ${maxDebt}`);
  if (!(cost > 0 && cost < Infinity)) throw new BucketArgumentError(`cost must be > 0, got ${cost}`);
  if (!Number.isFinite(nowMs)) throw new BucketArgumentError(`nowMs must be finite, got ${nowMs}`);
}

// Helpers for the decision headers (SPEC §4); seconds are whole numbers, rounded up.

/** Whole seconds, rounded up, for `Retry-After` and the `t=` of `RateLimit`. */
export function msToWholeSeconds(ms: number): number {
  return Math.ceil(ms / 1000);
}

/** Ms for an empty bucket to refill its whole capacity: the `w=` of `RateLimit-Policy` (in seconds). */
export function capacityRefillMs(limits: BucketLimits): number {
  const ms = (limits.capacity * limits.periodMs) / limits.refill;
  return Math.min(ms, MAX_WAIT_MS);
}

/** Whole tokens left, for the `r=` of `RateLimit`: `max(0, floor(balance))`. */
export function remainingTokens(balance: number): number {
  return balance > 0 ? Math.floor(balance) : 0;
}
