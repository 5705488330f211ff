/**
 * A rule's limits in the one shape every algorithm's plug-in reads (compile, summary): a format-2 rule's
 * `limits` as stored, and a format-1 rule as the one token bucket it is, named "" (so it keeps the v1
 * store key), with the rule's `client`, `maxDebt` and `cost`.
 */
import type { RuleLimit } from './limit-schema.js';
import type { RuleFields } from './schema.js';

/** The limits of `rule` in its order; [] for an unlimited rule. */
export function limitsOf(rule: RuleFields): RuleLimit[] {
  if ('limit' in rule) {
    return [
      {
        name: '',
        client: rule.client,
        algorithm: 'token-bucket',
        capacity: rule.limit.capacity,
        refill: rule.limit.refill,
        period: rule.limit.period,
        maxDebt: rule.maxDebt,
        cost: rule.cost,
      },
    ];
  }
  return 'limits' in rule ? rule.limits : [];
}
