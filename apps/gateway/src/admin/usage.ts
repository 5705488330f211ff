/**
 * `GET /usage?rule=<name>&client=<client key>` on the admin port: where one client stands against
 * every limit of one rule now, charging nothing (docs/visibility.md). The limits' states are read as
 * each algorithm stores them (Redis, one MULTI with TIME, or the in-process store) and evaluated with
 * the TypeScript twins of the algorithms, so the answer is what the client's next request would be
 * told by each limit (a concurrency limit: the slots in flight).
 */
import { isClientKey, usageOfClient } from '@sluice/engine';
import type {
  CompiledRule,
  CompiledRuleSet,
  LimitCheck,
  LimitOutcome,
  RulePlan,
  SecretClientKeys,
} from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../http/errors.js';
import { adminRule } from './admin-rule.js';

export interface UsageRouteOptions {
  rules: () => CompiledRuleSet | undefined;
  /** the decision core's plan of a rule: each limit's store key name and spec, as requests use them */
  planOf: (rule: CompiledRule) => RulePlan;
  /** each check's outcome now, charging nothing (peek.ts); rejects when the store cannot be read */
  peek: (checks: readonly LimitCheck[]) => Promise<LimitOutcome[]>;
  /** how the core keys credential headers: a raw `header:<value>` is looked up by its digest */
  secretKeys: SecretClientKeys;
}

export function registerUsageRoute(admin: FastifyInstance, options: UsageRouteOptions): void {
  admin.get<{ Querystring: Record<string, unknown> }>('/usage', async (request, reply) => {
    const { rule: name, client } = request.query;
    if (typeof name !== 'string' || name === '' || typeof client !== 'string' || !isClientKey(client)) {
      reply.code(400);
      return errorBody(
        'SLUICE_ADMIN_BAD_QUERY',
        'expected ?rule=<rule name>&client=<client key: ip:<address>, header:<value>, jwt:<claim value> or global>',
      );
    }
    const found = adminRule(options.rules(), name, reply);
    if ('answer' in found) return found.answer;
    try {
      return await usageOfClient(options.planOf(found.rule), name, client, options.secretKeys, options.peek);
    } catch (error) {
      request.log.warn({ err: error }, 'usage: the store could not be read');
      reply.code(503).header('retry-after', '1');
      return errorBody('SLUICE_STORE_UNAVAILABLE', 'the rate limit store cannot be read right now');
    }
  });
}
