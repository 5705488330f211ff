/**
 * The limiter's vocabulary (rule format v2): what one limit is, what one check of a request asks,
 * and the one decision a store answers for all the checks of a request.
 *
 * A v1 rule (`limit`, `client`, `cost`, `maxDebt`) is one token-bucket check named "" (its key is
 * the v1 key, so counters survive an upgrade); a v2 rule (`limits`) is one check per limit, in the
 * rule's order. A store decides all of a request's checks at once, all or nothing: when any check
 * denies, none is charged.
 */
import type { RegisteredSpec } from './algorithms/index.js';

export type { ConcurrencySpec } from './algorithms/concurrency/model.js';
export type { SlidingWindowSpec } from './algorithms/sliding-window/model.js';
export type { TokenBucketSpec } from './algorithms/token-bucket/model.js';

/**
 * What one limit is, for the plug-in that decides it: the union of every registered algorithm's spec
 * (algorithms/index.ts), so that registering an algorithm is what makes its spec a `LimitSpec`.
 */
export type LimitSpec = RegisteredSpec;
export type LimitAlgorithm = LimitSpec['algorithm'];

/** One limit of one request: which counter, how it behaves, what the request takes from it. */
export interface LimitCheck {
  /** the store key, built with `limitKey()` */
  readonly key: string;
  readonly spec: LimitSpec;
  /** what this request takes from this limit; > 0 (a concurrency limit: always 1, one slot) */
  readonly cost: number;
  /** concurrency: the id of the slot this request takes (unique per request); ignored otherwise */
  readonly leaseId?: string;
}

/**
 * What the end of an exchange does to one limit a request was admitted on (docs/lifecycle.md), all of one
 * request's in ONE store call: a token bucket or sliding window is charged `delta` on top (> 0) or
 * given `-delta` back (< 0); a concurrency limit gives its slot back.
 */
export interface Settlement {
  /** the key the request was admitted on */
  readonly key: string;
  readonly spec: LimitSpec;
  /**
   * token bucket, sliding window: the real cost minus the cost admitted on (finite). Positive: charged
   * on top, even below -maxDebt; negative: given back, never above capacity (nor below 0 for a window)
   */
  readonly delta: number;
  /** the store's clock when the request was admitted (`StoreDecision.atMs`): a window gives back where it counted */
  readonly admittedAtMs: number;
  /** concurrency: the slot to give back (the admission's `leaseId`) */
  readonly leaseId?: string;
  /**
   * Present on a refund (the upstream answered a refundable status): what refunds may give back to
   * this limit and client per period (refill period or window), `refund.max` (SPEC §5). A refund past
   * it gives back only what is left, possibly nothing. Absent: not bounded (a charge's give-back, a
   * lease's unused tokens).
   */
  readonly refundMax?: number;
  /**
   * concurrency only: keep the slot instead of giving it back, its expiry set to `leaseMs` from now
   * (the exchange is still running: a long response, a WebSocket). A slot that expired already is not
   * taken again. A store call renews or settles, never both.
   */
  readonly renew?: boolean;
}

/** What one limit looks like after a settlement. */
export interface SettledLimit {
  /** as `LimitOutcome.level`: balance, estimate, or slots held (0 when dropped) */
  readonly level: number;
  readonly remaining: number;
  readonly resetMs: number;
  /**
   * true: nothing was applied, the limit was edited since the admission (its state records other
   * numbers or another algorithm, algorithms/state-tag.ts) and the settlement's arithmetic no longer
   * describes it
   */
  readonly dropped?: true;
}

/** A settlement computed for an older version of its limit, dropped (level 0, reset -1 in the script's reply). */
export const DROPPED_SETTLEMENT: SettledLimit = Object.freeze({
  level: 0,
  remaining: 0,
  resetMs: 0,
  dropped: true,
});

/** What one limit says about a request. */
export interface LimitOutcome {
  /** this limit alone would admit the request */
  readonly allowed: boolean;
  /**
   * token bucket: the balance after the decision (may be negative);
   * sliding window: the estimate after the decision
   */
  readonly level: number;
  /** whole units left after the decision, never negative (the `r` of the RateLimit header) */
  readonly remaining: number;
  /** ms until this limit could admit the same cost with no further traffic; 0 when allowed */
  readonly retryAfterMs: number;
  /** ms until the whole quota is available again with no further traffic (the `t` of RateLimit, in ms) */
  readonly resetMs: number;
}

/**
 * A store's one answer for all the checks of a request (the decision core wraps it in its own `Decision`,
 * decision/decision.ts). A denial is a value; only a store failure throws.
 */
export interface StoreDecision {
  /** every limit admits, and then every limit was charged; when false, nothing was charged */
  readonly allowed: boolean;
  /** one outcome per check, in the checks' order */
  readonly limits: readonly LimitOutcome[];
  /** index of the first denying check, -1 when allowed */
  readonly deniedIndex: number;
  /** the longest `retryAfterMs` among the denying checks; 0 when allowed */
  readonly retryAfterMs: number;
  /** the store's clock (ms) of the decision, for its settlement; absent when no store decided */
  readonly atMs?: number;
}

/**
 * The store key of one limit for one client under one rule: `<prefix>{<ruleId>:<clientKey>}` for a v1
 * rule's single limit (named ""), `<prefix>{<ruleId>:<clientKey>}:<limitName>` otherwise. The braces are
 * a Redis Cluster hash tag: every limit of one client under one rule lives in one slot.
 */
export function limitKey(prefix: string, ruleId: string, limitName: string, clientKey: string): string {
  return limitName === ''
    ? `${prefix}{${ruleId}:${clientKey}}`
    : `${prefix}{${ruleId}:${clientKey}}:${limitName}`;
}
