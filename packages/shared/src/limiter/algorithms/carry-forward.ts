/**
 * What a cached denial says later (the gateway's denial cache): a denied request changed nothing, and
 * other traffic could only have charged the same limits, so the store's answer `elapsedMs` later is
 * at best the same outcome carried forward with no further traffic, which each plug-in knows how to do
 * (a token bucket refills, a window's estimate is kept, slots held stay held; every wait counts down).
 */
import type { LimitOutcome, LimitSpec, StoreDecision } from '../limits.js';
import { algorithmOf } from './index.js';

/** One limit's outcome `elapsedMs` later with no further traffic. */
export function carryForward(outcome: LimitOutcome, spec: LimitSpec, elapsedMs: number): LimitOutcome {
  return algorithmOf(spec).carryForward(outcome, spec, elapsedMs);
}

/**
 * A denial `elapsedMs` later (`specs[i]` decides `decision.limits[i]`): each limit carried forward,
 * the decision's wait shortened by the time since.
 */
export function carryDenialForward(
  decision: StoreDecision,
  specs: readonly LimitSpec[],
  elapsedMs: number,
): StoreDecision {
  return {
    allowed: decision.allowed,
    deniedIndex: decision.deniedIndex,
    retryAfterMs: Math.max(0, decision.retryAfterMs - elapsedMs),
    limits: decision.limits.map((outcome, i) => carryForward(outcome, specs[i]!, elapsedMs)),
  };
}
