/**
 * The one value `decide()` answers for a request: which rule applied, what every limit said, the
 * header items' numbers, the wait, and a handle to settle the exchange once. A discriminated union on
 * `kind`: every way a request can come out of the limiter is a variant of its own, never a sentinel
 * compared by identity or a side table.
 */
import type { LimitOutcome } from '../limiter/limits.js';
import type { Exchange } from './exchange.js';
import type { RulePlan } from './rule-plan.js';

/** No rule set is loaded yet: nothing is proxied before the limits are known (503). */
export interface NotReadyDecision {
  readonly kind: 'not-ready';
}

/** No rule applies: proxied without limit. */
export interface NoRuleDecision {
  readonly kind: 'no-rule';
}

/** An `unlimited` rule applies: proxied without limit. */
export interface UnlimitedDecision {
  readonly kind: 'unlimited';
  readonly rule: RulePlan;
}

/** Who decided a limited request. */
export type LimitedSource =
  /** the shared store (Redis, or the in-process store when it is the primary) */
  | 'store'
  /** the denial cache: a denial the store gave, still in force */
  | 'cache'
  /** a lease this gateway holds (`mode: "lease"`) */
  | 'lease'
  /** the store failed and `STORE_FAILURE=local` decided in this gateway's own store */
  | 'fallback';

/** Every limit of the rule was decided. */
export interface LimitedDecision {
  readonly kind: 'limited';
  readonly source: LimitedSource;
  readonly rule: RulePlan;
  /** every limit admits the request, and every one was charged; when false none was */
  readonly allowed: boolean;
  /** denied by a rule that is not a shadow rule: the client gets 429 */
  readonly refused: boolean;
  /** one outcome per limit, in the rule's order (`rule.limits`, `rule.headerItems`) */
  readonly limits: readonly LimitOutcome[];
  /** the first denying limit, -1 when allowed */
  readonly deniedIndex: number;
  /** ms until the request could be admitted with no further traffic; 0 when allowed */
  readonly retryAfterMs: number;
  /** each limit's client key, in the rule's order */
  readonly clientKeys: readonly string[];
  /** an admitted request's settle/release handle, when its rule settles anything; end it once */
  readonly exchange: Exchange | undefined;
}

/** The store failed and `STORE_FAILURE=open`: admitted without a decision (no numbers to show). */
export interface OpenDecision {
  readonly kind: 'open';
  readonly rule: RulePlan;
}

/** The store failed and `STORE_FAILURE=closed`: refused with 503. */
export interface UnavailableDecision {
  readonly kind: 'unavailable';
  readonly rule: RulePlan;
  readonly retryAfterMs: number;
}

/** What a request would be decided on, charging nothing (`decide(facts, { charge: false })`: explain). */
export interface PreviewDecision {
  readonly kind: 'preview';
  readonly rule: RulePlan;
  /** each limit's client key, in the rule's order */
  readonly clientKeys: readonly string[];
}

export type Decision =
  | NotReadyDecision
  | NoRuleDecision
  | UnlimitedDecision
  | LimitedDecision
  | OpenDecision
  | UnavailableDecision
  | PreviewDecision;

export const NOT_READY: NotReadyDecision = Object.freeze({ kind: 'not-ready' });
export const NO_RULE: NoRuleDecision = Object.freeze({ kind: 'no-rule' });

/** The wait a 503 of `STORE_FAILURE=closed` announces, ms. */
export const UNAVAILABLE_RETRY_AFTER_MS = 1_000;
