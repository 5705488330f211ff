/**
 * What ranks one matching rule above another besides `priority` (docs/rules.md, "Which rule applies";
 * match.ts compares the whole key): how specific its path pattern is, and how many conditions it sets.
 */
import { pathSegments } from '../http/path-segments.js';
import type { Rule } from './schema.js';

/** `[literal segments, '*' segments, 1 if the pattern ends in '**' else 0]` of a rule's path pattern. */
export type PathSpecificity = readonly [literals: number, stars: number, globstar: 0 | 1];

/** The specificity tuple of a path pattern (see match.ts for how tuples compare). */
export function pathSpecificity(pattern: string): PathSpecificity {
  let literals = 0;
  let stars = 0;
  let globstar: 0 | 1 = 0;
  for (const segment of pathSegments(pattern)) {
    if (segment === '*') stars++;
    else if (segment === '**') globstar = 1;
    else literals++;
  }
  return [literals, stars, globstar];
}

/** The number of conditions a rule sets (precedence step 4). */
export function ruleConditions(match: Rule['match']): number {
  return (
    (match.methods !== undefined && match.methods.length > 0 ? 1 : 0) +
    (match.host !== undefined ? 1 : 0) +
    (match.headers !== undefined ? Object.keys(match.headers).length : 0) +
    (match.claims !== undefined ? Object.keys(match.claims).length : 0) +
    (match.authenticated !== undefined ? 1 : 0) +
    (match.clientIps !== undefined ? 1 : 0) +
    (match.notClientIps !== undefined ? 1 : 0)
  );
}
