/**
 * What lease mode (docs/lease-mode.md) may take from a rule's limits, as their plug-ins say: today
 * only token buckets can be leased, a quarter of their capacity at most, and never overdrawn.
 */
import type { LimitSpec } from '../limits.js';
import { algorithmOf } from './index.js';

/**
 * How many requests one lease of a rule may hold: the most requests whose cost every limit lets one
 * lease hold; 0 when the rule cannot lease (a limit that cannot be leased, or less than 2 requests fit:
 * a 1-request lease would only add a call to an exact decision).
 */
export function leaseRequestsOf(
  limits: readonly { readonly spec: LimitSpec; readonly cost: number }[],
): number {
  let most = Number.POSITIVE_INFINITY;
  for (const { spec, cost } of limits) {
    const requests = algorithmOf(spec).leaseRequests(spec, cost);
    if (!(requests > 0)) return 0;
    most = Math.min(most, requests);
  }
  return most >= 2 && Number.isFinite(most) ? most : 0;
}

/** The spec a lease on `spec`'s limit is taken with (a token bucket: `maxDebt` 0, never overdrawn). */
export function leaseSpecOf(spec: LimitSpec): LimitSpec {
  return algorithmOf(spec).leaseSpec(spec);
}
