/**
 * `GET /usage?rule=<name>&client=<client key>` on the admin port: where one client stands against
 * every limit of one rule now, charging nothing (docs/visibility.md). The limits' states are read as
 * each algorithm stores them (Redis, one MULTI with TIME, or the in-process store) and evaluated with
 * the TypeScript twins of the algorithms, so the answer is what the client's next request would be
 * told by each limit (a concurrency limit: the slots in flight).
 */
import { isIP } from 'node:net';
import {
  type CompiledRule,
  type CompiledRuleSet,
  GLOBAL_CLIENT_KEY,
  ipClientKey,
  type LimitCheck,
  type LimitOutcome,
  limitKey,
  MAX_CLIENT_KEY_BYTES,
  type RulePlan,
  type SecretClientKeys,
  usageOf,
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

/**
 * Whether `key` is a client key as the gateway writes it: `global`, `header:<value>` or
 * `jwt:<claim value>` (at most 256 bytes, else its SHA-256), or `ip:<address>` in the gateway's canonical form (IPv6 as its /64).
 */
export function isClientKey(key: string): boolean {
  if (key === GLOBAL_CLIENT_KEY) return true;
  if (key.startsWith('header:') || key.startsWith('jwt:')) {
    const value = key.slice(key.indexOf(':') + 1);
    return value !== '' && Buffer.byteLength(value) <= MAX_CLIENT_KEY_BYTES && !/[\r\n\0]/.test(value);
  }
  if (key.startsWith('ip:')) {
    const address = key.slice('ip:'.length).replace(/::\/64$/, '::');
    return isIP(address) !== 0 && ipClientKey(address) === key;
  }
  return false;
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
    const rule = options.planOf(found.rule);
    // a credential is looked up by its digest, as the core keys it: the admin may type the raw value
    const keyOf = (secret: boolean) => options.secretKeys.lookupKey(client, secret);
    // a global limit counts everyone under one key, whoever asks
    const checks: LimitCheck[] = rule.limits.map((limit) => ({
      key: limitKey(
        '',
        rule.id,
        limit.keyName,
        limit.clientBy === 'global' ? GLOBAL_CLIENT_KEY : keyOf(limit.clientSecret),
      ),
      spec: limit.spec,
      cost: limit.cost,
    }));
    // the answer never repeats a credential in clear
    const shown = rule.limits.some((limit) => limit.clientSecret) ? keyOf(true) : client;
    let outcomes: LimitOutcome[];
    try {
      outcomes = await options.peek(checks);
    } catch (error) {
      request.log.warn({ err: error }, 'usage: the store could not be read');
      reply.code(503).header('retry-after', '1');
      return errorBody('SLUICE_STORE_UNAVAILABLE', 'the rate limit store cannot be read right now');
    }
    return {
      rule: name,
      client: shown,
      limits: rule.limits.map((limit, i) => {
        const usage = usageOf(limit.spec, outcomes[i]!);
        return {
          name: limit.name,
          algorithm: limit.spec.algorithm,
          remaining: usage.remaining,
          debt: usage.debt,
          inFlight: usage.inFlight,
          fullInSeconds: usage.fullInSeconds,
        };
      }),
    };
  });
}
