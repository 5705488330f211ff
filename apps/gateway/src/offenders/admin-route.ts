/**
 * `GET /offenders?rule=<name>&minutes=15` on the admin port: what this gateway saw denied for one rule
 * over the last 1–60 minutes, the top 20, most denied first (docs/visibility.md).
 */
import { type CompiledRuleSet, OFFENDERS_MAX_MINUTES, parseOffenderMinutes } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../errors.js';
import type { OffenderLog } from './offender-log.js';

export interface OffendersRouteOptions {
  log: OffenderLog;
  /** the gateway's current rule set (undefined until loaded) */
  rules: () => CompiledRuleSet | undefined;
}

export function registerOffendersRoute(admin: FastifyInstance, options: OffendersRouteOptions): void {
  admin.get<{ Querystring: Record<string, unknown> }>('/offenders', async (request, reply) => {
    const { rule: name, minutes: rawMinutes } = request.query;
    const minutes = parseOffenderMinutes(rawMinutes);
    if (typeof name !== 'string' || name === '' || minutes === undefined) {
      reply.code(400);
      return errorBody(
        'SLUICE_ADMIN_BAD_QUERY',
        `expected ?rule=<rule name>&minutes=<1–${OFFENDERS_MAX_MINUTES}, default 15>`,
      );
    }
    const rules = options.rules();
    if (rules === undefined) {
      reply.code(503).header('retry-after', '1');
      return errorBody('SLUICE_RULES_NOT_LOADED', 'the gateway has not loaded its rules yet');
    }
    const rule = rules.rules.find((candidate) => candidate.name === name);
    if (rule === undefined) {
      reply.code(404);
      return errorBody(
        'SLUICE_RULE_NOT_FOUND',
        `no enabled rule named ${JSON.stringify(name)} on this gateway`,
      );
    }
    return { rule: name, minutes, items: options.log.top(rule.id, minutes) };
  });
}
