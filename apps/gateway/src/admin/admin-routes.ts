/**
 * The admin listener's routes (docs/visibility.md): health, readiness, Prometheus metrics, top
 * offenders and usage. Never on the proxy port.
 */
import type { Engine } from '@sluice/engine';
import type { FastifyInstance } from 'fastify';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { requireAdminToken } from './admin-token.js';
import { registerOffendersRoute } from './offenders.js';
import { registerUsageRoute } from './usage.js';

export interface AdminRoutesOptions {
  /** the rules in force, the offenders, usage: all the engine's */
  engine: Engine;
  metrics: GatewayMetrics;
  /** true once the gateway is shutting down (readiness fails first) */
  isClosing: () => boolean;
  /** GATEWAY_ADMIN_TOKEN: /usage and /offenders require it as a bearer token when set */
  adminToken?: string | undefined;
}

export function registerAdminRoutes(admin: FastifyInstance, options: AdminRoutesOptions): void {
  const { engine, metrics } = options;
  const { rules, core } = engine;
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
  registerOffendersRoute(admin, { log: engine.offenders.log, rules: currentRules });
  registerUsageRoute(admin, {
    rules: currentRules,
    planOf: (rule) => core.planOf(rule),
    secretKeys: core.secretKeys,
    peek: (checks) => engine.peek(checks),
  });
}
