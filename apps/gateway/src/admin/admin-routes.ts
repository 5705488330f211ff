/**
 * The admin listener's routes (docs/visibility.md): health, readiness, Prometheus metrics, top
 * offenders and usage. Never on the proxy port.
 */
import { type DecisionCore, MemoryStore, peekOutcomes, type Store } from '@sluice/shared';
import { peekRedis, RedisStore } from '@sluice/shared/redis';
import type { FastifyInstance } from 'fastify';
import type { RulesSource } from '../rules/rules-source.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { requireAdminToken } from './admin-token.js';
import { registerOffendersRoute } from './offenders/admin-route.js';
import type { OffenderLog } from './offenders/offender-log.js';
import { registerUsageRoute } from './usage.js';

export interface AdminRoutesOptions {
  rules: RulesSource;
  core: DecisionCore;
  primary: Store;
  /** REDIS_KEY_PREFIX: the primary store's keys start with it */
  redisKeyPrefix: string;
  metrics: GatewayMetrics;
  offenders: OffenderLog;
  /** true once the gateway is shutting down (readiness fails first) */
  isClosing: () => boolean;
  /** GATEWAY_ADMIN_TOKEN: /usage and /offenders require it as a bearer token when set */
  adminToken?: string | undefined;
}

export function registerAdminRoutes(admin: FastifyInstance, options: AdminRoutesOptions): void {
  const { rules, core, primary, metrics } = options;
  admin.get('/healthz', async () => ({ status: 'ok' }));
  admin.get('/readyz', async (_request, reply) => {
    const current = rules.current;
    const closing = options.isClosing();
    if (closing || current === undefined) {
      reply.code(503);
      return { status: closing ? 'closing' : 'loading rules', rulesVersion: null };
    }
    return { status: 'ready', rulesVersion: current.version, rules: current.compiled.size };
  });
  admin.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  const currentRules = () => rules.current?.compiled;
  // the answers that name clients (a credential's digest, an IP) are for the admin only
  if (options.adminToken !== undefined)
    requireAdminToken(admin, ['/usage', '/offenders'], options.adminToken);
  registerOffendersRoute(admin, { log: options.offenders, rules: currentRules });
  registerUsageRoute(admin, {
    rules: currentRules,
    planOf: (rule) => core.planOf(rule),
    secretKeys: core.secretKeys,
    peek: async (checks) => {
      if (primary instanceof RedisStore) return peekRedis(primary.client, options.redisKeyPrefix, checks);
      if (primary instanceof MemoryStore) {
        const { states, nowMs } = primary.peekStates(checks.map((check) => check.key));
        return peekOutcomes(checks, states, nowMs);
      }
      throw new Error(`usage cannot read a ${primary.kind} store`);
    },
  });
}
