/**
 * What an algorithm plug-in provides. Everything an algorithm means lives in its own folder
 * (`algorithms/<name>/`): its TypeScript model and Lua twin (with the differential test between them),
 * and in its `index.ts` everything else the rest of Sluice asks of it: the key it is stored under, how
 * usage reads its stored state, what its RateLimit header items say, what a cached denial carries
 * forward, whether a lease may take from it, and its rule format (fields, stored schema, defaults,
 * checks, compile, a one-line summary for people). The registry (`algorithms/index.ts`) lists the
 * plug-ins, one line each; nothing outside a plug-in's folder switches on an algorithm's name.
 *
 * A store decides a request in two phases, so that it can be all or nothing over several limits:
 * `evaluate` every check against its stored state without changing anything, then, only if every
 * evaluation allows, `charge` each one; otherwise `hold` each one (nothing is written). The end of the
 * exchange is `settle` (the script's "settle" operation): a cost difference for a token bucket or a
 * sliding window, a slot given back for a concurrency limit.
 */
import type { Static, TObject, TSchema } from 'typebox';
import type { Client, RuleFieldError } from '../../format/fields.js';
import type { LimitOutcome, Settlement } from '../limits.js';
import type { GrantRefund } from './refund-ledger.js';
import type { Dropped } from './state-tag.js';

/** What every spec carries: the name of the plug-in that decides it. */
export interface SpecBase {
  readonly algorithm: string;
}

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

/** A settlement's result: the state to store (as `Charged`) and the limit's level after it. */
export interface Applied<State> {
  readonly dropped?: undefined;
  readonly level: number;
  readonly resetMs: number;
  readonly state: State;
  /** as `Charged.ttlMs` */
  readonly ttlMs: number;
}

/**
 * A settlement applied, or dropped: the state was written under another version of the limit (an
 * edit since the admission, state-tag.ts), which the settlement's arithmetic does not describe.
 */
export type Settled<State> = Applied<State> | Dropped;

/** The decision arithmetic (model.ts), the twin of the algorithm's Lua snippet. */
export interface AlgorithmModel<Spec extends SpecBase, State> {
  readonly name: Spec['algorithm'];
  /** Throws `LimitArgumentError` unless the spec and cost are finite and in range. */
  assertArguments(spec: Spec, cost: number): void;
  /**
   * The spec's numbers as the Lua snippet reads them (its `arity` of them), after the algorithm name
   * and the cost. A check's lease id (concurrency) is not among them: it travels with the request's
   * ids (acquire.lua, `takesId`), so that requests on the same limit send the same numbers.
   */
  luaArguments(spec: Spec): string[];
  /**
   * `state` is whatever the store holds under the check's key (undefined when nothing): a state of
   * another algorithm (a limit whose algorithm was edited) counts as nothing, as in Lua.
   */
  evaluate(state: unknown, spec: Spec, cost: number, nowMs: number, leaseId?: string): Evaluation<State>;
  /**
   * The end of an exchange on this limit (see `Settlement`): the next state and what it shows, or
   * `DROPPED` when the stored state was written under another version of the limit (state-tag.ts).
   * `refund`, for a refund (`settlement.refundMax`): what of the give-back refund.max allows, asked
   * only once the settlement is known to apply (refund-ledger.ts).
   */
  settle(
    state: unknown,
    settlement: Settlement & { readonly spec: Spec },
    nowMs: number,
    refund?: GrantRefund,
  ): Settled<State>;
}

/** How `GET /usage` reads a state from Redis without running the script (peek-redis.ts). */
export interface RedisStateRead<State> {
  /** the Redis command reading the state under `key` (the whole key, prefix included) and its arguments */
  command(key: string): readonly [command: string, ...args: string[]];
  /** the state in that command's reply; undefined for nothing stored, or anything unreadable (another algorithm's) */
  parse(reply: unknown): State | undefined;
}

/** Where one client stands against one limit (`GET /usage`). */
export interface LimitUsage {
  /** whole units left now (the `r` of the RateLimit header) */
  readonly remaining: number;
  /** how far below zero a token bucket is; 0 otherwise */
  readonly debt: number;
  /** requests holding a slot of a concurrency limit now; 0 otherwise */
  readonly inFlight: number;
  /** whole seconds until the whole quota is back with no further traffic */
  readonly fullInSeconds: number;
}

/** A limit's own fields as a rule writes them: field name → its TypeBox schema (with a description). */
export type LimitFields = Record<string, TSchema>;

/** One limit of a rule as written (before defaults), seen through one algorithm's fields. */
export type WrittenLimit<Fields extends LimitFields> = {
  readonly name: string;
  readonly client?: Client;
  readonly algorithm?: string;
  readonly cost?: number;
} & { readonly [K in keyof Fields]?: Static<Fields[K]> };

/** Where a limit sits in its rule (for its errors), and the cost one request takes from it. */
export interface LimitPlace {
  /** the prefix of the limit's fields: `limits.<i>` */
  readonly at: string;
  /** what one request takes: the limit's `cost`, else the rule's, else 1 */
  readonly cost: number;
  /** where that cost is written: `limits.<i>.cost`, or the rule's `cost` */
  readonly costField: string;
}

/** Why a limit takes no cost (a concurrency limit takes one slot per request, whatever it costs). */
export interface Costless {
  /** why a `cost` written on such a limit is refused */
  readonly refused: string;
  /** the reason given when a rule's `charge` or `refund` has nothing else to act on: `takes slots` */
  readonly inLifecycle: string;
}

/** One algorithm's part of the rule format (docs/rules.md): a limit with `"algorithm": "<name>"`. */
export interface LimitFormat<Spec extends SpecBase, Fields extends LimitFields, Stored extends TObject> {
  /** the algorithm for people: `token bucket` (field descriptions, summaries) */
  readonly label: string;
  /**
   * The fields it is written with, beyond `name`, `client`, `algorithm` and `cost`. Every algorithm's
   * fields are merged into one flat input schema (so a bad body gets an error naming its field): a field
   * two algorithms share must have the same schema but for its description.
   */
  readonly fields: Fields;
  /** which of `fields` a limit must write */
  readonly required: readonly (keyof Fields & string)[];
  /** undefined: a limit takes a cost (its own `cost`, else the rule's); else why not */
  readonly costless?: Costless;
  /** a stored limit: `name`, `client` and `algorithm` filled in, then its own fields */
  readonly storedSchema: Stored;
  /** The stored limit of a checked input (`client` has its defaults already); key order is the API's. */
  withDefaults(input: WrittenLimit<Fields>, client: Client): Static<Stored>;
  /**
   * What JSON Schema cannot say about its own fields (after the rule's checks of which fields are
   * present): durations, a limit some request could pass. Messages name fields under `place.at`.
   */
  check(input: WrittenLimit<Fields>, place: LimitPlace, errors: RuleFieldError[]): void;
  /** The spec a stored limit decides with (a gateway still sets a concurrency slot's `leaseMs` itself). */
  compile(limit: Static<Stored>): Spec;
  /** One line for people, without the limit's name: `5 per x-api-key, 1 more every 1s (token bucket)`. */
  describe(limit: Static<Stored>): string;
}

export interface Algorithm<
  Spec extends SpecBase,
  State,
  Fields extends LimitFields = LimitFields,
  Stored extends TObject = TObject,
> extends AlgorithmModel<Spec, State> {
  /** its Lua snippet, relative to the algorithms folder (spliced into acquire.lua) */
  readonly luaFile: string;

  /** The limit part of its store key (`limitKey`'s `limitName`): concurrency keeps `<name>:slots`. */
  keyName(limitName: string): string;
  /** How usage reads its stored state from Redis (the in-process store holds the state itself). */
  readonly redisState: RedisStateRead<State>;

  /** The `r` of RateLimit: whole units left at `level`, never negative. */
  remaining(spec: Spec, level: number): number;
  /**
   * The `t` of RateLimit as draft-11 reads it, in ms: with no further traffic, how long until `r`
   * (`outcome.remaining`) grows by one; 0 when it cannot grow (the quota is whole, or `r` is already
   * at the quota's whole units). Never shorter than the truth: a client waiting `t` finds more quota.
   */
  moreQuotaMs(spec: Spec, outcome: LimitOutcome): number;
  /**
   * Its `RateLimit-Policy` parameters after the item name: `q=10;w=60`, `q=5;qu="concurrent-requests"`
   * (draft-11 wants Integers: a fractional quota is written rounded down).
   */
  policyParameters(spec: Spec): string;
  /** The level of a limit nobody asked (a full bucket, an empty window, no slot held). */
  idleLevel(spec: Spec): number;
  /**
   * A cached denial's outcome `elapsedMs` later with no further traffic (other traffic could only have
   * charged it, so this never shows more room than the store would).
   */
  carryForward(outcome: LimitOutcome, spec: Spec, elapsedMs: number): LimitOutcome;
  /** Where a client stands, from an outcome read without charging (peek.ts). */
  usage(spec: Spec, outcome: LimitOutcome): LimitUsage;

  /** Most requests of `cost` one lease may hold (docs/lease-mode.md); 0: it cannot be leased. */
  leaseRequests(spec: Spec, cost: number): number;
  /** The spec a lease is taken with (a token bucket: no overdraft, only an exact decision may). */
  leaseSpec(spec: Spec): Spec;
  /**
   * From a denied lease's outcome: ms until a lease of `tokens` (taken with `leaseSpec`) could be
   * granted with no further traffic (lease mode at its limit waits this long before asking again).
   */
  leaseWaitMs(spec: Spec, outcome: LimitOutcome, tokens: number): number;

  /**
   * Its numbers divided among `gateways` (STORE_FAILURE=local while Redis is away, SPEC §1): what one
   * of that many gateways may admit on its own so that together they admit about the limit.
   */
  fairShare(spec: Spec, gateways: number): Spec;
  /** Most one request may cost when a rule charges at the response (0: it takes no cost). */
  chargeCeiling(spec: Spec): number;
  /**
   * What refunds give back to one client per period at most when the rule's `refund.max` is not
   * written (SPEC §5: the limit's capacity or max; 0: it takes no cost, nothing to refund).
   */
  defaultRefundMax(spec: Spec): number;

  /**
   * Present when its admissions are slots held for the whole exchange (concurrency): each request
   * takes one (cost 1) under an id of its own, gives it back when the exchange ends, and its denials
   * are never remembered (a slot may come back any moment). `withLifetime` is the spec a slot is
   * taken with: the taking gateway sets how long it is held at most. `takeVerdict` is what a take
   * finds with `held` slots live before it, taken or not (the request it belongs to was admitted or
   * denied): how the gateway reads takes decided in a row by one command (acquire.lua's takeAgain).
   */
  readonly slots?: {
    withLifetime(spec: Spec, leaseMs: number): Spec;
    takeVerdict(spec: Spec, held: number, taken: boolean): Verdict;
  };

  /** Its limits in the rule format. */
  readonly rule: LimitFormat<Spec, Fields, Stored>;
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

/**
 * An outcome `elapsedMs` later at `level`: every wait shorter by the time since (waits count down
 * with no further traffic), never below 0.
 */
export function outcomeLater(
  outcome: LimitOutcome,
  level: number,
  remaining: number,
  elapsedMs: number,
): LimitOutcome {
  return {
    allowed: outcome.allowed,
    level,
    remaining,
    retryAfterMs: Math.max(0, outcome.retryAfterMs - elapsedMs),
    resetMs: Math.max(0, outcome.resetMs - elapsedMs),
  };
}

/** Whole seconds until the whole quota is back, as usage reports them. */
export function fullInSeconds(outcome: LimitOutcome): number {
  return Math.ceil(outcome.resetMs / 1000);
}
