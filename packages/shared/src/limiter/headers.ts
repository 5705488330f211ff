/**
 * Every number of the decision headers (IETF draft-ietf-httpapi-ratelimit-headers), in one place:
 *
 *     RateLimit-Policy: "<item>";q=<quota>;w=<window seconds>, …
 *     RateLimit: "<item>";r=<remaining>;t=<seconds until the whole quota is back>, …
 *     Retry-After: <whole seconds until the request could be admitted, at least 1>
 *
 * one item per limit, in the rule's order: `"<rule>"` for a v1 rule, `"<rule>.<limit>"` for each limit
 * of a v2 rule. Seconds are whole numbers, rounded up.
 */
import { capacityRefillMs } from './algorithms/token-bucket/model.js';
import type { LimitOutcome, LimitSpec, StoreDecision } from './limits.js';

/** Largest sf-integer (RFC 9651): bounds `w` and `t` for absurdly slow limits. */
const MAX_SF_INTEGER = 999_999_999_999_999;

/** Whole seconds, rounded up, for a whole number of ms (`t`, `w`, Retry-After). */
export function wholeSecondsUp(ms: number): number {
  return Math.min(Math.ceil(ms / 1000), MAX_SF_INTEGER);
}

/**
 * The `r` of one limit: whole units left after the decision, never negative. Token bucket:
 * `max(0, floor(balance))`; sliding window: `max(0, floor(max − estimate))`; concurrency: free
 * slots, `max − held`.
 */
export function remainingOf(spec: LimitSpec, level: number): number {
  const left = spec.algorithm === 'token-bucket' ? level : spec.max - level;
  return left > 0 ? Math.floor(left) : 0;
}

/**
 * The `q` and `w` of one limit. Token bucket: `q` = capacity, `w` = seconds for an empty bucket to
 * be full, by the same arithmetic as `t` (so a just-emptied bucket reports `t` = `w`); sliding window:
 * `q` = max, `w` = the window in seconds. `w` is at least 1.
 */
export function policyNumbers(spec: LimitSpec): { q: number; w: number } {
  if (spec.algorithm === 'concurrency') return { q: spec.max, w: 1 };
  if (spec.algorithm === 'token-bucket') {
    return { q: spec.capacity, w: Math.max(1, wholeSecondsUp(capacityRefillMs(spec))) };
  }
  return { q: spec.max, w: Math.max(1, wholeSecondsUp(spec.windowMs)) };
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
 * One `RateLimit-Policy` item: `<item>;q=<quota>;w=<seconds>`, or for a concurrency limit
 * `<item>;q=<max>;qu="concurrent-requests"` (a quota of requests in flight has no window).
 */
export function policyItem(item: string, spec: LimitSpec): string {
  if (spec.algorithm === 'concurrency') return `${item};q=${spec.max};qu="concurrent-requests"`;
  const { q, w } = policyNumbers(spec);
  return `${item};q=${q};w=${w}`;
}

/** The whole `RateLimit-Policy` value; computed once per rule. */
export function policyHeader(items: readonly { readonly item: string; readonly spec: LimitSpec }[]): string {
  return items.map(({ item, spec }) => policyItem(item, spec)).join(', ');
}

/** One `RateLimit` item. */
export function rateLimitItem(item: string, outcome: LimitOutcome): string {
  return `${item};r=${outcome.remaining};t=${wholeSecondsUp(outcome.resetMs)}`;
}

/** The whole `RateLimit` value: `items[i]` names `decision.limits[i]`. */
export function rateLimitHeader(items: readonly string[], decision: StoreDecision): string {
  let header = '';
  for (let i = 0; i < decision.limits.length; i++) {
    if (i > 0) header += ', ';
    header += rateLimitItem(items[i]!, decision.limits[i]!);
  }
  return header;
}
