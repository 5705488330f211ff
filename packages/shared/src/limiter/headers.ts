/**
 * Every number of the decision headers (IETF draft-ietf-httpapi-ratelimit-headers, as of draft-11), in
 * one place:
 *
 *     RateLimit-Policy: "<item>";q=<quota>;w=<window seconds>, …
 *     RateLimit: "<item>";r=<remaining>;t=<seconds until more quota>;pk=:<partition key>:, …
 *     Retry-After: <whole seconds until the request could be admitted, at least 1>
 *
 * one item per limit, in the rule's order: `"<rule>"` for a v1 rule, `"<rule>.<limit>"` for each limit
 * of a v2 rule. `q`, `w`, `r` and `t` are Integers (draft-11 allows nothing else): seconds rounded up,
 * fractional quotas rounded down. `t` is draft-11's "until additional quota is made available" (until
 * `r` grows by one), not the older "until the whole quota is back", so it never exceeds Retry-After
 * on a 429 of cost 1. `pk` is a hash of the client key, never the key (a per-client limit only).
 */
import { createHash } from 'node:crypto';
import { algorithmOf } from './algorithms/index.js';
import { wholeSecondsUp } from './algorithms/whole-seconds.js';
import type { LimitOutcome, LimitSpec, StoreDecision } from './limits.js';

export { wholeSecondsUp } from './algorithms/whole-seconds.js';

/**
 * The `r` of one limit: whole units left after the decision, never negative (its plug-in says what a
 * unit is: token bucket `max(0, floor(balance))`; sliding window `max(0, floor(max − estimate))`;
 * concurrency: free slots, `max − held`).
 */
export function remainingOf(spec: LimitSpec, level: number): number {
  return algorithmOf(spec).remaining(spec, level);
}

/** Retry-After of a denied decision: whole seconds, rounded up, at least 1. */
export function retryAfterSeconds(decision: Pick<StoreDecision, 'retryAfterMs'>): number {
  return Math.max(1, wholeSecondsUp(decision.retryAfterMs));
}

/** The item name (an sf-string): `"<rule>"` for a v1 rule's limit (named ""), else `"<rule>.<limit>"`. */
export function headerItemName(ruleName: string, limitName: string): string {
  const name = limitName === '' ? ruleName : `${ruleName}.${limitName}`;
  return `"${name.replace(/[\\"]/g, '\\$&')}"`;
}

/**
 * One `RateLimit-Policy` item: `<item>;<the plug-in's parameters>`. Token bucket `q=<capacity>;w=<seconds
 * for an empty bucket to be full>`, sliding window `q=<max>;w=<window seconds>` (`w` at least 1),
 * concurrency `q=<max>;qu="concurrent-requests"` (a quota of requests in flight has no window).
 */
export function policyItem(item: string, spec: LimitSpec): string {
  return `${item};${algorithmOf(spec).policyParameters(spec)}`;
}

/** The whole `RateLimit-Policy` value; computed once per rule. */
export function policyHeader(items: readonly { readonly item: string; readonly spec: LimitSpec }[]): string {
  return items.map(({ item, spec }) => policyItem(item, spec)).join(', ');
}

/** What the RateLimit header needs of one limit of a rule (a `LimitPlan` is one). */
export interface HeaderLimit {
  /** its item name (`headerItemName`) */
  readonly headerItem: string;
  readonly spec: LimitSpec;
  /** `global`: one quota shared by every client, so no partition key */
  readonly clientBy: string;
}

/** What the RateLimit header needs of a decision (a gateway's `LimitedDecision` is one). */
export interface HeaderDecision {
  /** one outcome per limit, in the rule's order */
  readonly limits: readonly LimitOutcome[];
  /** each limit's client key, in the rule's order */
  readonly clientKeys: readonly string[];
  /** the decision's wait (Retry-After), ms; 0 when allowed */
  readonly retryAfterMs: number;
}

/**
 * The `t` of one limit, ms: its plug-in's time until `r` grows by one. A denied limit with nothing
 * left is also bounded by the decider's own waits, so `t` never contradicts Retry-After. That bound
 * also speaks when the plug-in sees more than `r` (a lease at its limit: what accrues is the next
 * lease's, and the request is told none is left, while its balance already holds it).
 */
export function moreQuotaMs(spec: LimitSpec, outcome: LimitOutcome, decisionRetryAfterMs: number): number {
  const ms = algorithmOf(spec).moreQuotaMs(spec, outcome);
  if (outcome.allowed || outcome.remaining > 0) return ms;
  const decided = Math.min(outcome.retryAfterMs || decisionRetryAfterMs, decisionRetryAfterMs);
  return ms === 0 ? decided : Math.min(ms, decided);
}

/** Partition keys by client key: hashing is the dearest part of a header, and a client asks again. */
const partitionKeys = new Map<string, string>();
const PARTITION_KEYS_KEPT = 10_000;

/**
 * draft-11's `pk` for a client key: an sf-binary of the first 12 bytes of its SHA-256. Stable across
 * gateways and restarts (a client can tell its partitions apart), and never the key itself (an API key
 * in a header that logs and caches keep).
 */
export function partitionKey(clientKey: string): string {
  let pk = partitionKeys.get(clientKey);
  if (pk === undefined) {
    pk = `:${createHash('sha256').update(clientKey).digest().subarray(0, 12).toString('base64')}:`;
    // a bounded memo: forgetting everything at once is cheaper than ordering it, and rare
    if (partitionKeys.size >= PARTITION_KEYS_KEPT) partitionKeys.clear();
    partitionKeys.set(clientKey, pk);
  }
  return pk;
}

/** One `RateLimit` item. */
export function rateLimitItem(
  limit: HeaderLimit,
  outcome: LimitOutcome,
  clientKey: string | undefined,
  decisionRetryAfterMs: number,
): string {
  const t = wholeSecondsUp(moreQuotaMs(limit.spec, outcome, decisionRetryAfterMs));
  const item = `${limit.headerItem};r=${outcome.remaining};t=${t}`;
  return limit.clientBy === 'global' || clientKey === undefined
    ? item
    : `${item};pk=${partitionKey(clientKey)}`;
}

/** The whole `RateLimit` value: `limits[i]` names `decision.limits[i]`. */
export function rateLimitHeader(limits: readonly HeaderLimit[], decision: HeaderDecision): string {
  let header = '';
  for (let i = 0; i < decision.limits.length; i++) {
    if (i > 0) header += ', ';
    header += rateLimitItem(limits[i]!, decision.limits[i]!, decision.clientKeys[i], decision.retryAfterMs);
  }
  return header;
}
