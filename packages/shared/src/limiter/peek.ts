/**
 * Reading limits without charging anything (the gateway's `GET /usage`): the stored state of each
 * check, evaluated with the TypeScript twin of its algorithm and held (`evaluate(…).hold()` writes
 * nothing). The outcome is what the next request of the check's cost would be told, were it to arrive
 * at `nowMs` and every other limit of its rule to admit it.
 */
import { algorithmOf } from './algorithms/index.js';
import { outcomeOf } from './engine.js';
import type { LimitCheck, LimitOutcome, LimitSpec } from './limits.js';

/** Each check's outcome at `nowMs` given its stored state (`states[i]` for `checks[i]`, undefined when none). */
export function peekOutcomes(
  checks: readonly LimitCheck[],
  states: readonly unknown[],
  nowMs: number,
): LimitOutcome[] {
  return checks.map((check, i) =>
    outcomeOf(check.spec, algorithmOf(check.spec).evaluate(states[i], check.spec, check.cost, nowMs).hold()),
  );
}

/**
 * The state a Redis value holds for `spec`'s algorithm, as the Lua twin reads it: token bucket
 * `"<balance> <updatedAtMs>"`, sliding window `"<windowIndex> <current> <previous>"`. Anything else
 * (absent, another algorithm's state) is undefined, which the algorithm reads as nothing stored.
 */
export function parseStoredState(spec: LimitSpec, stored: string | null | undefined): unknown {
  if (typeof stored !== 'string') return undefined;
  const parts = stored.split(' ');
  if (parts.some((part) => part === '' || !Number.isFinite(Number(part)))) return undefined;
  const n = parts.map(Number);
  if (spec.algorithm === 'token-bucket') {
    return n.length === 2 ? { balance: n[0], updatedAtMs: n[1] } : undefined;
  }
  return n.length === 3 ? { windowIndex: n[0], current: n[1], previous: n[2] } : undefined;
}

/** The usage numbers of one outcome (see `GET /usage`). */
export interface LimitUsage {
  /** whole units left now (the `r` of the RateLimit header) */
  readonly remaining: number;
  /** how far below zero a token bucket is; 0 otherwise */
  readonly debt: number;
  /** whole seconds until the whole quota is back with no further traffic */
  readonly fullInSeconds: number;
}

export function usageOf(spec: LimitSpec, outcome: LimitOutcome): LimitUsage {
  return {
    remaining: outcome.remaining,
    debt: spec.algorithm === 'token-bucket' && outcome.level < 0 ? -outcome.level : 0,
    fullInSeconds: Math.ceil(outcome.resetMs / 1000),
  };
}
