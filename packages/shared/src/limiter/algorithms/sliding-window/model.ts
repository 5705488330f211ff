/**
 * The sliding window, Cloudflare's approximation, in pure TypeScript with the clock passed in.
 * `sliding-window.lua` is its twin (same double operations in the same order; the
 * differential test against Redis checks that they agree bit for bit). Change one, change the other.
 *
 * Windows are aligned to whole multiples of `windowMs` since the Unix epoch on the store's clock.
 * `current` is the cost admitted in the window that holds `now`, `previous` in the one before, and
 *
 *     estimate = current + previous · (1 − elapsed / windowMs)
 *
 * with `elapsed` the time since the current window began. A request of cost `c` is admitted iff
 * `estimate + c ≤ max`; then `current ← current + c`; a denied request changes nothing. With no
 * further traffic the estimate only falls, reaching 0 at most two windows later, which is how long
 * the state is kept.
 *
 * Float care:
 * - the weight `1 − elapsed/windowMs` is clamped to [0, 1] (a floored index can put `elapsed` a hair
 *   outside the window), which keeps the estimate non-increasing in time, window edges included;
 * - a clock behind the stored window counts as the start of that window: time never runs backwards
 *   for a window, and nothing it admitted is forgotten;
 * - `retryAfterMs` and `resetMs` (until the estimate is 0) are whole ms found with the deciding
 *   expression itself (see `waitMs`).
 *
 * Edits (state-tag.ts): the state records `W<max>/<windowMs>`. A new `max` keeps the counts as they
 * are; a window of another length cannot read counts indexed in the old one (a 1-minute index read as
 * hours is a window 3,000 years ahead), so the old window's estimate now is carried into the new
 * window as its `current`: what was admitted recently still counts, and the state is again at most two
 * windows from empty. A settlement computed for another version is dropped.
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

/**
 * Cloudflare's sliding-window approximation: `estimate = current + previous · (1 − elapsed/window)`
 * over windows aligned to whole multiples of `windowMs` since the Unix epoch (store clock).
 */
export interface SlidingWindowSpec {
  readonly algorithm: 'sliding-window';
  /** most cost the estimate may reach; > 0 */
  readonly max: number;
  /** window length in milliseconds; > 0 */
  readonly windowMs: number;
}

/**
 * What a store keeps per window; in Redis the string `"<windowIndex> <current> <previous> <tag>"`
 * ('%.17g' each, then the tag).
 */
export interface WindowState {
  /** `floor(ms / windowMs)` of the window `current` counts */
  readonly windowIndex: number;
  readonly current: number;
  readonly previous: number;
  /** the numbers it was written under, `windowTag` */
  readonly tag: string;
}

/** `W<max>/<windowMs>`: what a window's state records of its limit (state-tag.ts). */
export const windowTag: (limits: WindowLimits) => string = perSpec(
  (limits) => `W${limits.max}/${limits.windowMs}`,
);

/** The window length a tag records (`W<max>/<windowMs>`). */
function windowMsOfTag(tag: string): number {
  return Number(tag.slice(tag.indexOf('/') + 1));
}

/** The counts in force at a moment, with the time since their window began. */
interface Counts {
  readonly windowIndex: number;
  readonly current: number;
  readonly previous: number;
  readonly elapsedMs: number;
}

type WindowLimits = Omit<SlidingWindowSpec, 'algorithm'>;

/** Throws `LimitArgumentError` unless the limits and cost are finite and in range. */
export function assertWindowArguments(limits: WindowLimits, cost: number): void {
  assertPositive('max', limits.max);
  assertPositive('windowMs', limits.windowMs);
  assertPositive('cost', cost);
}

/** The decision arithmetic of the plug-in (index.ts). */
export const slidingWindowModel: AlgorithmModel<SlidingWindowSpec, WindowState> = {
  name: 'sliding-window',
  assertArguments: assertWindowArguments,
  luaArguments: (spec) => [String(spec.max), String(spec.windowMs), windowTag(spec)],
  evaluate: evaluateWindow,
  settle: settleWindow,
};

/**
 * docs/lifecycle.md: `delta > 0` is counted on top in the window that holds `nowMs`; `delta < 0` is given back
 * to the window the request was counted in (`admittedAtMs`), never below 0, while that window still
 * counts (current or previous); once forgotten there is nothing to give back.
 */
export function settleWindow(
  state: unknown,
  settlement: Settlement & { readonly spec: WindowLimits },
  nowMs: number,
  refund?: GrantRefund,
): Settled<WindowState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const { windowMs } = settlement.spec;
  const tag = windowTag(settlement.spec);
  // a state of other numbers, or of another algorithm: the settlement was computed for an older version
  if (state !== undefined && !(isWindowState(state) && state.tag === tag)) return DROPPED;
  // a refund gives back what refund.max leaves of this window
  const delta = refund === undefined ? settlement.delta : -refund(-settlement.delta, windowMs);
  const c = countsAt(isWindowState(state) ? state : undefined, windowMs, nowMs);
  let current = c.current;
  let previous = c.previous;
  if (delta > 0) {
    current = current + delta;
  } else if (delta < 0) {
    const admittedIndex = Math.floor(settlement.admittedAtMs / windowMs);
    if (admittedIndex === c.windowIndex) current = Math.max(0, current + delta);
    else if (admittedIndex === c.windowIndex - 1) previous = Math.max(0, previous + delta);
  }
  const next: WindowState = { windowIndex: c.windowIndex, current, previous, tag };
  const resetMs = untilEmptyMs(next, windowMs, nowMs);
  return { level: estimateAt(next, windowMs, nowMs), resetMs, state: next, ttlMs: resetMs };
}

/** The estimate of `state` at `atMs` with no further traffic (0 for no state). */
export function estimateAt(state: WindowState | undefined, windowMs: number, atMs: number): number {
  const c = countsAt(state, windowMs, atMs);
  return estimateOf(c, windowMs);
}

export function evaluateWindow(
  state: unknown,
  limits: WindowLimits,
  cost: number,
  nowMs: number,
): Evaluation<WindowState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const { max, windowMs } = limits;
  const tag = windowTag(limits);
  const current = currentState(state, windowMs, tag, nowMs);
  const c = countsAt(current, windowMs, nowMs);
  const estimate = estimateOf(c, windowMs);
  const allowed = estimate + cost <= max;
  return {
    allowed,
    hold(): Verdict {
      const resetMs = untilEmptyMs(current, windowMs, nowMs);
      let retryAfterMs = 0;
      if (!allowed) {
        retryAfterMs = resetMs; // never admissible: cost > max
        if (cost <= max) {
          retryAfterMs = waitMs(
            (x) => estimateAt(current, windowMs, nowMs + x) + cost <= max,
            guessMs(c, windowMs, max - cost),
          );
        }
      }
      return { allowed, level: estimate, retryAfterMs, resetMs };
    },
    charge() {
      if (!allowed) throw new LimitArgumentError('charge() of a request this window denies');
      const next: WindowState = {
        windowIndex: c.windowIndex,
        current: c.current + cost,
        previous: c.previous,
        tag,
      };
      const level = estimateAt(next, windowMs, nowMs);
      const resetMs = untilEmptyMs(next, windowMs, nowMs);
      return { verdict: { allowed, level, retryAfterMs: 0, resetMs }, state: next, ttlMs: resetMs };
    },
  };
}

/**
 * The state a decision starts from: none; the stored one; or, written under a window of another length
 * (an edit), that window's estimate now carried into the new window as its `current`.
 */
function currentState(state: unknown, windowMs: number, tag: string, nowMs: number): WindowState | undefined {
  if (!isWindowState(state)) return undefined;
  if (state.tag === tag) return state;
  const writtenMs = windowMsOfTag(state.tag);
  if (writtenMs === windowMs) return state;
  if (!(writtenMs > 0 && writtenMs < Number.POSITIVE_INFINITY)) return undefined; // unreadable: nothing
  const carried = estimateAt(state, writtenMs, nowMs);
  return { windowIndex: Math.floor(nowMs / windowMs), current: carried, previous: 0, tag };
}

function countsAt(state: WindowState | undefined, windowMs: number, atMs: number): Counts {
  let windowIndex = Math.floor(atMs / windowMs);
  let elapsedMs = atMs - windowIndex * windowMs;
  if (state === undefined) return { windowIndex, current: 0, previous: 0, elapsedMs };
  if (windowIndex < state.windowIndex) {
    windowIndex = state.windowIndex; // the clock is behind the stored window: its start
    elapsedMs = 0;
  }
  if (windowIndex === state.windowIndex) {
    return { windowIndex, current: state.current, previous: state.previous, elapsedMs };
  }
  if (windowIndex === state.windowIndex + 1) {
    return { windowIndex, current: 0, previous: state.current, elapsedMs };
  }
  return { windowIndex, current: 0, previous: 0, elapsedMs };
}

function estimateOf(c: Counts, windowMs: number): number {
  let elapsedMs = c.elapsedMs;
  if (!(elapsedMs > 0)) elapsedMs = 0;
  let weight = 1 - elapsedMs / windowMs;
  if (!(weight > 0)) weight = 0;
  return c.current + c.previous * weight;
}

function untilEmptyMs(state: WindowState | undefined, windowMs: number, nowMs: number): number {
  return waitMs(
    (x) => estimateAt(state, windowMs, nowMs + x) <= 0,
    guessMs(countsAt(state, windowMs, nowMs), windowMs, 0),
  );
}

/**
 * Real-number guess of the wait until `estimate ≤ target` (only where the search starts): within the
 * current window when `current` alone fits, else in the next one, where `current` has become `previous`.
 */
function guessMs(c: Counts, windowMs: number, target: number): number {
  if (c.current <= target) {
    return windowMs * (1 - (target - c.current) / c.previous) - c.elapsedMs;
  }
  return windowMs - c.elapsedMs + windowMs * (1 - target / c.current);
}

function isWindowState(state: unknown): state is WindowState {
  return (
    typeof state === 'object' &&
    state !== null &&
    typeof (state as WindowState).windowIndex === 'number' &&
    typeof (state as WindowState).current === 'number' &&
    typeof (state as WindowState).previous === 'number' &&
    typeof (state as WindowState).tag === 'string' &&
    (state as WindowState).tag.startsWith('W')
  );
}
