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
