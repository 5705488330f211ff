/**
 * What an edit of a rule does to its counters that the edit itself does not show: a limit that keeps
 * its name but changes algorithm (token bucket ↔ sliding window ↔ concurrency) stores a different
 * kind of state, so its counters start afresh — every client gets a full quota at once (docs/rules.md,
 * "Editing a rule"). `rules apply --dry-run` and the console say so before the change is made, in
 * these words.
 */
import { DEFAULT_ALGORITHM } from '../limiter/algorithms/index.js';
import { limitsOf } from './limits-of.js';
import type { RuleFields } from './schema.js';

export interface AlgorithmChange {
  /** the limit's name ("" for a format-1 rule's one limit) */
  limit: string;
  from: string;
  to: string;
}

/** The limits of `after` that `before` has under the same name with another algorithm, in `after`'s order. */
export function algorithmChanges(before: RuleFields, after: RuleFields): AlgorithmChange[] {
  const old = new Map(limitsOf(before).map((l) => [l.name, l.algorithm ?? DEFAULT_ALGORITHM]));
  const changes: AlgorithmChange[] = [];
  for (const limit of limitsOf(after)) {
    const from = old.get(limit.name);
    const to = limit.algorithm ?? DEFAULT_ALGORITHM;
    if (from !== undefined && from !== to) changes.push({ limit: limit.name, from, to });
  }
  return changes;
}

/** `limit \`daily\` changes algorithm: its counters start afresh (token-bucket → sliding-window)` */
export function algorithmChangeNotice(change: AlgorithmChange): string {
  return `limit \`${change.limit}\` changes algorithm: its counters start afresh (${change.from} → ${change.to})`;
}
