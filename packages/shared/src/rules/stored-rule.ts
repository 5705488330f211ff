/**
 * A rule as the rules API would store it, built from its input without a rules API: for embedders and
 * tests that give a gateway or the decision core its rules directly (`StaticRules`). It refuses what
 * the rules API would refuse, so a rule set built here is one the API could have served.
 */
import { checkRule } from './check.js';
import { withDefaults } from './defaults.js';
import type { Rule, RuleInput } from './schema.js';

export class RuleInputError extends Error {
  readonly code = 'RULE_INVALID';
}

let storedRules = 0;

/** `input` with its defaults, a fresh id and version 1; throws `RuleInputError` on what checkRule finds. */
export function storedRule(input: RuleInput): Rule {
  const errors = checkRule(input);
  if (errors.length > 0) {
    const what = errors.map((e) => `${e.field} ${e.message}`).join('; ');
    throw new RuleInputError(`rule ${JSON.stringify(input.name)}: ${what}`);
  }
  storedRules++;
  return {
    ...withDefaults(input),
    id: `00000000-0000-4000-8000-${String(storedRules).padStart(12, '0')}`,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
}
