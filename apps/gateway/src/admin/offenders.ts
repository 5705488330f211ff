/**
 * `GET /offenders?rule=<name>&minutes=15` on the admin port: what this gateway saw denied for one rule
 * over the last 1–60 minutes, the top 20, most denied first (docs/visibility.md).
 */

import type { OffenderLog } from '@sluice/engine';
import { type CompiledRuleSet, OFFENDERS_MAX_MINUTES, parseOffenderMinutes } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../http/errors.js';
import { adminRule } from './admin-rule.js';

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
    const found = adminRule(options.rules(), name, reply);
    if ('answer' in found) return found.answer;
    const rule = found.rule;
    return { rule: name, minutes, items: options.log.top(rule.id, minutes) };
  });
}
