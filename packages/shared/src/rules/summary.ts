/**
 * A rule's limits in words, one line each, the same wherever people read them: the console (the
 * rules API serves them with `GET /rules`), the CLI's plan and the demo banner. Each algorithm's plug-in
 * says its own limit (`describe`).
 */
import { algorithmNamed } from '../limiter/algorithms/index.js';
import type { RuleLimit } from './limit-schema.js';
import { limitsOf } from './limits-of.js';
import type { RuleFields } from './schema.js';

/** `burst: 5 per x-api-key, 1 more every 1s (token bucket)`; a format-1 rule's limit (named "") has no name. */
export function limitSummary(limit: RuleLimit): string {
  const algorithm = algorithmNamed(limit.algorithm);
  const words = algorithm === undefined ? `a ${limit.algorithm} limit` : algorithm.rule.describe(limit);
  return limit.name === '' ? words : `${limit.name}: ${words}`;
}

/** One line per limit of `rule`, in its order; `['no limit']` for an unlimited rule. */
export function ruleSummary(rule: RuleFields): string[] {
  if ('unlimited' in rule) return ['no limit'];
  return limitsOf(rule).map(limitSummary);
}
