/**
 * The rule an admin query (`/offenders`, `/usage`) names, looked up in the gateway's current rule set:
 * the rule, or the answer to send instead (503 while no rule set is loaded, 404 for an unknown name).
 */
import type { CompiledRule, CompiledRuleSet } from '@sluice/shared';
import type { FastifyReply } from 'fastify';
import { type ErrorBody, errorBody } from '../http/errors.js';

export function adminRule(
  rules: CompiledRuleSet | undefined,
  name: string,
  reply: FastifyReply,
): { rule: CompiledRule } | { answer: ErrorBody } {
  if (rules === undefined) {
    reply.code(503).header('retry-after', '1');
    return { answer: errorBody('SLUICE_RULES_NOT_LOADED', 'the gateway has not loaded its rules yet') };
  }
  const rule = rules.rules.find((candidate) => candidate.name === name);
  if (rule === undefined) {
    reply.code(404);
    return {
      answer: errorBody(
        'SLUICE_RULE_NOT_FOUND',
        `no enabled rule named ${JSON.stringify(name)} on this gateway`,
      ),
    };
  }
  return { rule };
}
