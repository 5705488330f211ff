/**
 * Prometheus metrics of the rules API (`GET /metrics`, docs/visibility.md): requests by route and
 * status, how long the database takes per repository operation, and the rule-set version this replica
 * knows. A registry of its own (never prom-client's global one), so several apps in one process (tests,
 * the demo) do not collide.
 *
 * Series whose labels are known in advance exist from the start at 0 (each route with each status its
 * schema documents, each database operation), so a dashboard shows 0 rather than "No data" and
 * `rate()` sees the first event.
 */
import type { FastifyInstance } from 'fastify';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { errorResponse } from './errors.js';
import type { RulesRepository } from './rules/repository.js';

/** Repository methods timed as database operations (each is one query or one transaction). */
export const DATABASE_OPERATIONS = [
  'create',
  'get',
  'list',
  'replace',
  'delete',
  'history',
  'currentRulesetVersion',
  'snapshot',
] as const;
export type DatabaseOperation = (typeof DATABASE_OPERATIONS)[number] | 'ping';

/** The `route` label of a request no route took (404 SLUICE_ROUTE_NOT_FOUND). */
export const UNMATCHED_ROUTE = 'unmatched';

export class RulesApiMetrics {
  readonly registry = new Registry();

  readonly requests = new Counter({
    name: 'sluice_rules_api_requests_total',
    help: 'Requests answered, by method, route pattern (e.g. /rules/:id; "unmatched" when no route took it) and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });

  readonly databaseSeconds = new Histogram({
    name: 'sluice_rules_api_database_duration_seconds',
    help: 'Time of one database operation (a query or a transaction), by operation, failures included',
    labelNames: ['operation'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });

  readonly databaseErrors = new Counter({
    name: 'sluice_rules_api_database_errors_total',
    help: 'Database operations that failed (unreachable, timed out, or any unexpected error), by operation; answers such as 404 or 412 are not failures',
    labelNames: ['operation'] as const,
    registers: [this.registry],
  });

  readonly rulesetVersion: Gauge;

  /** `readRulesetVersion`: the version at scrape time (the snapshot cache: no query while it is fresh) */
  constructor(options: { readRulesetVersion?: () => Promise<number> } = {}) {
    collectDefaultMetrics({ register: this.registry });
    dropGaugesNamedTotal(this.registry);
    for (const operation of [...DATABASE_OPERATIONS, 'ping'] as const) {
      this.databaseSeconds.zero({ operation });
      this.databaseErrors.inc({ operation }, 0);
    }
    const read = options.readRulesetVersion;
    const gauge: Gauge = new Gauge({
      name: 'sluice_rules_api_ruleset_version',
      help: 'The rule-set version this replica knows, read at scrape (-1 until the database has answered once)',
      registers: [this.registry],
      // prom-client awaits an async collect; when the read fails the last known version stays (the
      // database error counter says why).
      collect: async () => {
        const version = read === undefined ? undefined : await read().catch(() => undefined);
        if (version !== undefined) gauge.set(version);
      },
    });
    gauge.set(-1);
    this.rulesetVersion = gauge;
  }

  /** Times `work` as `operation`; counts it as failed unless it threw one of the API's own answers. */
  async timed<T>(operation: DatabaseOperation, work: () => Promise<T>): Promise<T> {
    const stop = this.databaseSeconds.startTimer({ operation });
    try {
      return await work();
    } catch (err) {
      const code = errorResponse(err).code;
      if (code === 'SLUICE_DATABASE_UNAVAILABLE' || code === 'SLUICE_INTERNAL') {
        this.databaseErrors.inc({ operation });
      }
      throw err;
    } finally {
      stop();
    }
  }

  /** Wraps the repository's database operations in `timed` (on this instance only). */
  instrument(repository: RulesRepository): void {
    const target = repository as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    for (const operation of DATABASE_OPERATIONS) {
      const method = target[operation]!.bind(repository);
      target[operation] = (...args) => this.timed(operation, () => method(...args));
    }
  }

  /**
   * Counts every answer by its route pattern. Each route's documented statuses (its schema's
   * `response` keys) start at 0 as soon as the route is registered; register this before the routes.
   */
  observe(app: FastifyInstance): void {
    app.addHook('onRoute', (route) => {
      const statuses = Object.keys(route.schema?.response ?? {}).filter((s) => /^[1-5][0-9][0-9]$/.test(s));
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      for (const method of methods) {
        if (method === 'HEAD') continue;
        for (const status of statuses) this.requests.inc({ method, route: route.url, status }, 0);
      }
    });
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? UNMATCHED_ROUTE;
      this.requests.inc({ method: request.method, route, status: String(reply.statusCode) });
    });
  }

  /** The text exposition format, as Prometheus scrapes it. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

/**
 * prom-client's default Node.js metrics include gauges named `…_total` (`nodejs_active_handles_total`
 * and its siblings); `promtool check metrics` rejects those names (a `_total` suffix promises a
 * counter). They are left out rather than renamed: the process metrics beside them stay.
 */
function dropGaugesNamedTotal(registry: Registry): void {
  for (const metric of registry.getMetricsAsArray()) {
    const { name, type } = metric as unknown as { name: string; type: string };
    if (type === 'gauge' && name.endsWith('_total')) registry.removeSingleMetric(name);
  }
}
