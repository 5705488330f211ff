/**
 * Builds one gateway (proxy listener, admin listener, rules cache, store) without listening, so
 * `server.ts`, the tests and the benchmark all start it the same way:
 *
 *   const gateway = buildGateway(loadConfig({ ...env }));
 *   const { proxyUrl, adminUrl } = await gateway.start(); // listens; rules load in the background
 *   await gateway.ready();                                // first rule set loaded
 *   …
 *   await gateway.close();                                // in-flight requests finish first
 */

import type { AddressInfo, Socket } from 'node:net';
import { MemoryStore, peekOutcomes, type Store } from '@sluice/shared';
import { peekRedis, RedisStore } from '@sluice/shared/redis';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  LogController,
} from 'fastify';
import { fastifyTrustProxy, type GatewayConfig } from './config.js';
import { DenialCache } from './denial-cache.js';
import { clientErrorResponse, errorBody } from './errors.js';
import { LimiterEvents } from './events.js';
import { LeaseManager } from './lease/lease-manager.js';
import { GatewayMetrics } from './metrics.js';
import { registerOffendersRoute } from './offenders/admin-route.js';
import { OffenderFlusher } from './offenders/flusher.js';
import { OffenderLog } from './offenders/offender-log.js';
import { admitRequest, registerProxies, rewriteTarget } from './proxy.js';
import { RateLimiter } from './rate-limit.js';
import { RulesCache } from './rules-cache.js';
import { GuardedStore } from './store-policy.js';
import { registerUsageRoute } from './usage.js';

/** A concurrency slot outlives the longest exchange (UPSTREAM_TIMEOUT_MS) by this much (docs/lifecycle.md), ms. */
export const SLOT_LEASE_MARGIN_MS = 5_000;

/** How long `start()` waits for a first Redis connection before listening anyway, ms. */
const REDIS_CONNECT_WAIT_MS = 2_000;

export interface GatewayDeps {
  /** the primary store instead of the one REDIS_URL names (tests); closed with the gateway */
  store?: Store;
  /** a logger to use instead of a new pino logger at LOG_LEVEL */
  logger?: FastifyBaseLogger;
  /** how long the store's circuit breaker stays open before probing, ms */
  storeCoolDownMs?: number;
  /** collect Node process metrics (default true) */
  defaultMetrics?: boolean;
  /** monotonic clock in ms for the breaker and decision timing (default `performance.now`) */
  now?: () => number;
  /** how often top-offender counts go to Redis, ms (default 5000); 0 = only on `offenders.flush()` and close */
  offendersFlushMs?: number;
}

/**
 * How often Node looks for requests past HEADERS_TIMEOUT_MS / REQUEST_TIMEOUT_MS. Node's default is
 * 30 s, which would let a slow client hold its connection up to 30 s past its timeout; a quarter of
 * the head timeout (at most 1 s) enforces the timeouts within a fraction of themselves.
 */
export function connectionsCheckingIntervalMs(headersTimeoutMs: number): number {
  return Math.max(10, Math.min(1_000, Math.floor(headersTimeoutMs / 4)));
}

export interface Gateway {
  readonly config: GatewayConfig;
  readonly proxy: FastifyInstance;
  readonly admin: FastifyInstance;
  readonly metrics: GatewayMetrics;
  readonly rules: RulesCache;
  readonly store: GuardedStore;
  /** what the limiter decided and settled, for subscribers */
  readonly events: LimiterEvents;
  /** top offenders: this gateway's own counts, and their flush to Redis (undefined without Redis) */
  readonly offenders: { log: OffenderLog; flush(): Promise<void> };
  /** Listens on both ports and starts loading rules; resolves with the listening URLs. */
  start(): Promise<{ proxyUrl: string; adminUrl: string }>;
  /** Resolves once the first rule set is loaded (the gateway is ready). */
  ready(): Promise<void>;
  /** Stops taking requests, lets in-flight ones finish, then releases everything. Idempotent. */
  close(): Promise<void>;
}

export function buildGateway(config: GatewayConfig, deps: GatewayDeps = {}): Gateway {
  const proxy = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: { level: config.logLevel } }),
    // one log line per request costs more than the rest of the gateway's work on it
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    trustProxy: fastifyTrustProxy(config.trustProxy),
    rewriteUrl: rewriteTarget,
    bodyLimit: config.bodyLimitBytes,
    requestTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    http: {
      maxHeaderSize: config.maxHeaderBytes,
      headersTimeout: config.headersTimeoutMs,
      requestTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: connectionsCheckingIntervalMs(config.headersTimeoutMs),
      // rewriteTarget refuses an HTTP/1.1 request without Host itself, with a code like every other answer
      requireHostHeader: false,
    },
    // admitRequest answers requests that arrive while closing with SLUICE_SHUTTING_DOWN
    return503OnClosing: false,
    clientErrorHandler: (error: Error & { code?: string }, socket: Socket) => {
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      if (socket.writable) socket.end(clientErrorResponse(error));
      socket.destroySoon();
    },
  });
  const log = proxy.log;
  // Node would answer `Expect: 100-continue` at once, inviting the body before any decision; the
  // rate-limit hook sends the 100 itself, only to admitted requests.
  proxy.server.on('checkContinue', (request, response) => proxy.server.emit('request', request, response));
  const admin = Fastify({
    loggerInstance: log.child({ listener: 'admin' }),
    logController: new LogController({ disableRequestLogging: true }),
  });

  const metrics = new GatewayMetrics({ defaultMetrics: deps.defaultMetrics });
  const primary = deps.store ?? createPrimaryStore(config, log);
  const store = new GuardedStore({
    primary,
    policy: config.storeFailure,
    // an in-process primary cannot fail, so it is its own fallback
    local:
      primary.kind === 'memory'
        ? primary
        : config.storeFailure === 'local'
          ? new MemoryStore({ maxKeys: config.localStoreMaxKeys })
          : undefined,
    metrics,
    log,
    coolDownMs: deps.storeCoolDownMs,
    now: deps.now,
  });
  const denials = new DenialCache(config.denialCacheSize);
  metrics.denialCacheSize = () => denials.size;
  const events = new LimiterEvents();
  const leases = new LeaseManager({ store, leaseMs: config.leaseMs, now: deps.now });
  metrics.leaseTokensOutstanding = () => leases.outstandingTokens;
  events.onSettled(({ kind, ok }) => metrics.settlements.labels(kind, ok ? 'ok' : 'error').inc());
  const offenderLog = new OffenderLog();
  events.onDenied((event) => offenderLog.record(event));
  const offenderFlusher =
    primary instanceof RedisStore
      ? new OffenderFlusher({
          log: offenderLog,
          redis: primary.client,
          keyPrefix: config.redisKeyPrefix,
          intervalMs: deps.offendersFlushMs,
          logger: log,
        })
      : undefined;
  const limiter = new RateLimiter({
    store,
    denials,
    metrics,
    events,
    leases,
    slotLeaseMs: config.upstreamTimeoutMs + SLOT_LEASE_MARGIN_MS,
    trustProxy: config.trustProxy !== false,
    now: deps.now,
  });
  const rules = new RulesCache({
    rulesApiUrl: config.rulesApiUrl,
    token: config.rulesApiToken,
    refresh: config.rulesRefresh,
    fetchTimeoutMs: config.rulesFetchTimeoutMs,
    metrics,
    log,
    onChange: (snapshot) => limiter.setRuleSet(snapshot),
  });

  let closing = false;
  proxy.addHook(
    'onRequest',
    admitRequest({
      upstreams: config.upstreams,
      metrics,
      trustProxy: config.trustProxy !== false,
      isClosing: () => closing,
      bodyLimitBytes: config.bodyLimitBytes,
    }),
  );
  proxy.addHook('onRequest', limiter.onRequest);
  proxy.setErrorHandler((error: FastifyError, request, reply) => {
    const statusCode = error.statusCode && error.statusCode >= 400 ? error.statusCode : 500;
    if (statusCode >= 500) {
      request.log.error({ err: error }, 'request failed');
      reply.code(500).send(errorBody('SLUICE_INTERNAL', 'internal gateway error'));
      return;
    }
    // Fastify's own 4xx (a Content-Length it cannot read, a body over the limit): one of our codes
    const code = statusCode === 413 ? 'SLUICE_BODY_TOO_LARGE' : 'SLUICE_BAD_REQUEST';
    reply.code(statusCode === 413 ? 413 : 400).send(errorBody(code, error.message));
  });
  const proxyRoutes = registerProxies(proxy, {
    upstreams: config.upstreams,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    bodyLimitBytes: config.bodyLimitBytes,
    metrics,
  });

  admin.get('/healthz', async () => ({ status: 'ok' }));
  admin.get('/readyz', async (_request, reply) => {
    const current = rules.current;
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
  registerOffendersRoute(admin, { log: offenderLog, rules: currentRules });
  registerUsageRoute(admin, {
    rules: currentRules,
    peek: async (checks) => {
      if (primary instanceof RedisStore) return peekRedis(primary.client, config.redisKeyPrefix, checks);
      if (primary instanceof MemoryStore) {
        const { states, nowMs } = primary.peekStates(checks.map((check) => check.key));
        return peekOutcomes(checks, states, nowMs);
      }
      throw new Error(`usage cannot read a ${primary.kind} store`);
    },
  });

  let closed: Promise<void> | undefined;
  const gateway: Gateway = {
    config,
    proxy,
    admin,
    metrics,
    rules,
    store,
    events,
    offenders: { log: offenderLog, flush: () => offenderFlusher?.flush() ?? Promise.resolve() },
    async start() {
      await proxyRoutes;
      rules.start();
      if (primary instanceof RedisStore) {
        // Give Redis a moment to connect, so the first requests are not decided by the failure policy.
        // A Redis that is down is not fatal: the policy decides until it comes back.
        await primary.ready(REDIS_CONNECT_WAIT_MS).catch((error: unknown) => {
          log.warn(
            { err: error },
            `Redis is not reachable: STORE_FAILURE=${config.storeFailure} decides until it is`,
          );
        });
      }
      if (deps.offendersFlushMs !== 0) offenderFlusher?.start();
      await admin.listen({ port: config.adminPort, host: config.host });
      await proxy.listen({ port: config.port, host: config.host });
      return { proxyUrl: listeningUrl(proxy), adminUrl: listeningUrl(admin) };
    },
    ready: () => rules.whenLoaded(),
    close() {
      closed ??= (async () => {
        closing = true;
        await proxyRoutes.catch(() => {});
        await proxy.close();
        await rules.stop();
        await limiter.close(); // unused lease tokens back to the store while it is still open
        await offenderFlusher?.stop();
        await store.close();
        await admin.close();
      })();
      return closed;
    },
  };
  return gateway;
}

function createPrimaryStore(config: GatewayConfig, log: FastifyBaseLogger): Store {
  if (config.redisUrl === undefined && config.redisClusterNodes === undefined) {
    log.warn(
      'REDIS_URL is not set: limits are kept in this process only. Each gateway replica enforces its own ' +
        'limits (N replicas admit N times the limit). Set REDIS_URL to share them.',
    );
    return new MemoryStore({ maxKeys: config.localStoreMaxKeys });
  }
  const cluster = config.redisClusterNodes !== undefined;
  const what = cluster ? 'the Redis Cluster' : 'Redis';
  const store = new RedisStore(
    config.redisClusterNodes ? { clusterNodes: config.redisClusterNodes } : config.redisUrl!,
    {
      keyPrefix: config.redisKeyPrefix,
      commandTimeoutMs: config.storeTimeoutMs,
      coalesceWrites: true,
      onGiveBackFailure: (error) =>
        log.warn(
          { err: error },
          'could not give back a cross-slot charge: the limit stays charged until it refills',
        ),
    },
  );
  let connected = false;
  store.client.on('ready', () => {
    connected = true;
    log.info(`connected to ${what}`);
  });
  store.client.on(cluster ? 'end' : 'close', () => {
    if (!connected) return;
    connected = false;
    log.warn(`lost the connection to ${what}; reconnecting`);
  });
  if (cluster) {
    // a node lost or a slot moved: ioredis follows; say so once per change, not per request
    store.client.on('+node', (node: { options?: { host?: string; port?: number } }) =>
      log.info(`Redis Cluster node ${node.options?.host}:${node.options?.port} joined`),
    );
    store.client.on('-node', (node: { options?: { host?: string; port?: number } }) =>
      log.warn(`Redis Cluster node ${node.options?.host}:${node.options?.port} left`),
    );
  }
  return store;
}

function listeningUrl(app: FastifyInstance): string {
  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}
