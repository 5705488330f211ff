/**
 * Reading limits without charging anything (the gateway's `GET /usage`): the stored state of each
 * check, evaluated with the TypeScript twin of its algorithm and held (`evaluate(…).hold()` writes
 * nothing). The outcome is what the next request of the check's cost would be told, were it to arrive
 * at `nowMs` and every other limit of its rule to admit it.
 *
 * A check's key must be the one its limit is stored under: `limitKey(prefix, ruleId,
 * limitKeyName(spec, limitName), clientKey)` (a concurrency limit's slots live under `<name>:slots`).
 */
import type { LimitUsage } from './algorithms/algorithm.js';
import { algorithmOf } from './algorithms/index.js';
import { outcomeOf } from './engine.js';
import type { LimitCheck, LimitOutcome, LimitSpec } from './limits.js';

export type { LimitUsage } from './algorithms/algorithm.js';

/**
 * Each check's outcome at `nowMs` given its stored state (`states[i]` for `checks[i]`, undefined when
 * none): the in-process store's states as `MemoryStore.peekStates` gives them, or Redis replies read
 * with `parseStoredState`.
 */
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
 * The state in the reply of `spec`'s Redis read (`redisStateCommand`), as the Lua twin wrote it: token
 * bucket `"<balance> <updatedAtMs>"`, sliding window `"<windowIndex> <current> <previous>"`, concurrency
 * the `[leaseId, expiresAtMs, …]` of its sorted set. Anything else (absent, another algorithm's state)
 * is undefined, which the algorithm reads as nothing stored.
 */
export function parseStoredState(spec: LimitSpec, reply: unknown): unknown {
  return algorithmOf(spec).redisState.parse(reply);
}

/** The Redis command that reads the state of `spec`'s limit under `key` (the whole key, prefix included). */
export function redisStateCommand(spec: LimitSpec, key: string): readonly [string, ...string[]] {
  return algorithmOf(spec).redisState.command(key);
}

/**
 * The usage numbers of one outcome (see `GET /usage`): `remaining`, a token bucket's `debt`, the
 * requests `inFlight` on a concurrency limit, and `fullInSeconds`.
 */
export function usageOf(spec: LimitSpec, outcome: LimitOutcome): LimitUsage {
  return algorithmOf(spec).usage(spec, outcome);
}
