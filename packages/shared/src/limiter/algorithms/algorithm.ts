/**
 * What an algorithm plug-in provides (one folder per algorithm: this TypeScript model, its Lua twin
 * registered in `ALGORITHMS` of acquire.lua, and the differential test between them).
 *
 * A store decides a request in two phases, so that it can be all or nothing over several limits:
 * `evaluate` every check against its stored state without changing anything, then, only if every
 * evaluation allows, `charge` each one; otherwise `hold` each one (nothing is written). The end of the
 * exchange is `settle` (the script's "settle" operation): a cost difference for a token bucket or a
 * sliding window, a slot given back for a concurrency limit.
 */
import type { LimitSpec, Settlement } from '../limits.js';

/** An outcome before `remaining` is derived from `level` (the engine does that, for both stores). */
export interface Verdict {
  readonly allowed: boolean;
  readonly level: number;
  readonly retryAfterMs: number;
  readonly resetMs: number;
}

export interface Charged<State> {
  readonly verdict: Verdict;
  /** the state to store */
  readonly state: State;
  /** how long the state matters, ms: 0 = delete it now, `MAX_WAIT_MS` = keep it without expiry */
  readonly ttlMs: number;
}

/** One check evaluated against its state; nothing is changed until `charge`. */
export interface Evaluation<State> {
  /** this limit alone would admit the request */
  readonly allowed: boolean;
  /** the outcome when nothing is charged (the request is denied by this or another limit) */
  hold(): Verdict;
  /** the outcome and the next state when the request is admitted; only when `allowed` */
  charge(): Charged<State>;
}

export interface Algorithm<Spec extends LimitSpec, State> {
  readonly name: Spec['algorithm'];
  /** Throws `LimitArgumentError` unless the spec and cost are finite and in range. */
  assertArguments(spec: Spec, cost: number): void;
  /**
   * The spec's numbers as the Lua snippet reads them (its `arity` of them), after the algorithm name
   * and the cost; `leaseId` is the check's (concurrency only).
   */
  luaArguments(spec: Spec, leaseId?: string): string[];
  /**
   * `state` is whatever the store holds under the check's key (undefined when nothing): a state of
   * another algorithm (a limit whose algorithm was edited) counts as nothing, as in Lua.
   */
  evaluate(state: unknown, spec: Spec, cost: number, nowMs: number, leaseId?: string): Evaluation<State>;
  /** The end of an exchange on this limit (see `Settlement`): the next state and what it shows. */
  settle(state: unknown, settlement: Settlement & { readonly spec: Spec }, nowMs: number): Settled<State>;
}

/** A settlement's result: the state to store (as `Charged`) and the limit's level after it. */
export interface Settled<State> {
  readonly level: number;
  readonly resetMs: number;
  readonly state: State;
  /** as `Charged.ttlMs` */
  readonly ttlMs: number;
}

/** A limit, cost or clock out of range (a bug or a broken rule, never a client's doing). */
export class LimitArgumentError extends RangeError {
  readonly code = 'LIMIT_INVALID_ARGUMENT';
}

/** Throws unless `x` is a finite number above 0 (or at least 0 with `orZero`). */
export function assertPositive(name: string, x: number, orZero = false): void {
  const ok = orZero ? x >= 0 && x < Infinity : x > 0 && x < Infinity;
  if (!ok) throw new LimitArgumentError(`${name} must be ${orZero ? '>= 0' : '> 0'}, got ${x}`);
}
