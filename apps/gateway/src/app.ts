/**
 * Builds one gateway (proxy listener, admin listener, rules source, limiter) without listening, so
 * `server.ts`, the tests and the benchmark all start it the same way:
 *
 *   const gateway = buildGateway(loadConfig({ ...env }));
 *   const { proxyUrl, adminUrl } = await gateway.start(); // listens; rules load in the background
 *   await gateway.ready();                                // first rule set loaded
 *   …
 *   await gateway.close();                                // in-flight requests finish first
 *
 * The layers (docs/gateway.md, "Layout"): @sluice/engine (the limiter, rules source, offenders) under
 * config/ → telemetry/ → http/ → admin/ → this file; a module imports only from its own layer or
 * lower ones (layers.test.ts).
 */

import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createEngine, type Engine, type EngineConfig, type RulesSource } from '@sluice/engine';
import type { Store } from '@sluice/shared';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import { registerAdminRoutes } from './admin/admin-routes.js';
import { fastifyTrustProxy, type GatewayConfig, type TrustFunction } from './config/config.js';
import { admitRequest } from './http/admission.js';
import { bodyTooLargeMessage } from './http/answers.js';
import { clientErrorResponse, errorBody } from './http/errors.js';
import { identityHook } from './http/identity-hook.js';
import { limitHook } from './http/limit-hook.js';
import {
  adaptNodeServer,
  Http1Requests,
  requestIdGenerator,
  requestIdOn,
  routeUpgrades,
} from './http/node-http1.js';
import { registerRequestContext } from './http/request-context.js';
import { registerUpstreams } from './http/upstreams.js';
import { WebSocketRelays } from './http/websocket.js';
import { GatewayMetrics } from './telemetry/metrics.js';

/** A concurrency slot outlives the longest exchange (UPSTREAM_TIMEOUT_MS) by this much (docs/lifecycle.md), ms. */
export const SLOT_LEASE_MARGIN_MS = 5_000;

/**
 * What closing takes after SHUTDOWN_TIMEOUT_MS at most: WebSocket close handshakes (1 s), then the
 * slots of what was cut given back, ms. server.ts gives `close()` this much more before it exits anyway.
 */
export const SHUTDOWN_CLOSE_MS = 2_000;

/** What a gateway can be given instead of what its configuration names (tests, embedders). */
export interface GatewayDeps {
  /** the rules instead of the rules API at RULES_API_URL (`StaticRules` of @sluice/engine) */
  rules?: RulesSource;
  /** the primary store instead of the one REDIS_URL names; closed with the gateway */
  store?: Store;
  /** a logger to use instead of a new pino logger at LOG_LEVEL */
  logger?: FastifyBaseLogger;
  /** how long the store's circuit breaker stays open before probing, ms */
  storeCoolDownMs?: number;
  /** collect Node process metrics (default true) */
  defaultMetrics?: boolean;
  /** monotonic clock in ms for the breaker, leases and decision timing (default `performance.now`) */
  now?: () => number;
  /** how often top-offender counts go to Redis, ms (default 5000); 0 = only on `offenders.flush()` and close */
  offendersFlushMs?: number;
  /** how often this gateway beats in Redis (the fair share's count), ms (default 1000); 0 = never (tests counting Redis commands) */
  heartbeatMs?: number;
  /**
   * how long a concurrency slot outlives UPSTREAM_TIMEOUT_MS without a renewal, ms (default
   * SLOT_LEASE_MARGIN_MS, 5000); tests shorten it to watch renewals within seconds
   */
  slotLeaseMarginMs?: number;
  /** at most one JWKS fetch per this many ms (default 30 s); tests rotate keys within seconds */
  jwksCooldownMs?: number;
  /** a JWKS older than this is fetched again in the background, ms (default 10 min) */
  jwksMaxAgeMs?: number;
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
  readonly rules: RulesSource;
  /** the engine this front door decides with: the decision core and its collaborators (store policy, denial cache, leases, events, offenders) */
  readonly limiter: Engine;
  /** top offenders: this gateway's own counts, and their flush to Redis (a no-op without Redis) */
  readonly offenders: Engine['offenders'];
  /** Listens on both ports and starts loading rules; resolves with the listening URLs. */
  start(): Promise<{ proxyUrl: string; adminUrl: string }>;
  /** Resolves once the first rule set is loaded (the gateway is ready). */
  ready(): Promise<void>;
  /**
   * Stops taking requests and lets in-flight exchanges finish for SHUTDOWN_TIMEOUT_MS; then closes
   * the WebSockets still open (1001), cuts the requests still running, gives every slot back and
   * releases everything. Idempotent.
   */
  close(): Promise<void>;
}

export function buildGateway(config: GatewayConfig, deps: GatewayDeps = {}): Gateway {
  const trust = fastifyTrustProxy(config.trustProxy);
  const proxy = createProxyListener(config, deps, trust);
  const log = proxy.log;
  const admin = Fastify({
    loggerInstance: log.child({ listener: 'admin' }),
    logController: new LogController({ disableRequestLogging: true }),
  });
  const metrics = new GatewayMetrics({ defaultMetrics: deps.defaultMetrics });
  const engine = createEngine(engineConfigOf(config, deps.slotLeaseMarginMs), {
    logger: log,
    metrics,
    rules: deps.rules,
    store: deps.store,
    storeCoolDownMs: deps.storeCoolDownMs,
    now: deps.now,
    offendersFlushMs: deps.offendersFlushMs,
    heartbeatMs: deps.heartbeatMs,
    jwksCooldownMs: deps.jwksCooldownMs,
    jwksMaxAgeMs: deps.jwksMaxAgeMs,
  });
  const { rules, verifier } = engine;
  const forwarding = { mode: config.forwardedHeaders, trust };
  const webSockets = new WebSocketRelays({
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    maxMessageBytes: config.bodyLimitBytes,
    forwarding,
  });
  metrics.webSocketsOpen = () => webSockets.size;
  routeUpgrades(proxy);
  let closing = false;
  const isClosing = () => closing;

  proxy.addHook(
    'onRequest',
    admitRequest({
      upstreams: config.upstreams,
      metrics,
      trustProxy: config.trustProxy !== false,
      isClosing,
      bodyLimitBytes: config.bodyLimitBytes,
    }),
  );
  // without a verifier every request is unauthenticated: the hook would only pass it on
  if (verifier !== undefined)
    proxy.addHook('onRequest', identityHook({ core: engine.core, verifier, metrics }));
  proxy.addHook('onRequest', limitHook({ core: engine.core, metrics }));
  proxy.setErrorHandler(answerFastifyErrors(config.bodyLimitBytes));
  const upstreamsRegistered = registerUpstreams(proxy, {
    upstreams: config.upstreams,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    bodyLimitBytes: config.bodyLimitBytes,
    metrics,
    forwarding,
    webSockets,
  });
  registerAdminRoutes(admin, { engine, metrics, isClosing, adminToken: config.adminToken });

  let closed: Promise<void> | undefined;
  return {
    config,
    proxy,
    admin,
    metrics,
    rules,
    limiter: engine,
    offenders: engine.offenders,
    async start() {
      await upstreamsRegistered;
      await engine.start();
      await admin.listen({ port: config.adminPort, host: config.host });
      await proxy.listen({ port: config.port, host: config.host });
      return { proxyUrl: listeningUrl(proxy), adminUrl: listeningUrl(admin) };
    },
    ready: () => rules.whenLoaded(),
    close() {
      closed ??= (async () => {
        closing = true;
        await upstreamsRegistered.catch(() => {});
        const proxyClosed = proxy.close();
        const graceOver = await Promise.race([
          proxyClosed.then(() => false),
          sleep(config.shutdownTimeoutMs, true, { ref: false }),
        ]);
        if (graceOver) {
          // what is still open now is cut: its slots come back as each exchange ends
          await webSockets.closeAll(1001);
          proxy.server.closeAllConnections();
        }
        await proxyClosed;
        await engine.drain(SHUTDOWN_CLOSE_MS / 2);
        await engine.close();
        await admin.close();
      })();
      return closed;
    },
  };
}

/**
 * The proxy listener: Node's limits and timeouts, the normalised target, request ids, every answer
 * with a code.
 */
function createProxyListener(
  config: GatewayConfig,
  deps: GatewayDeps,
  trust: TrustFunction | false,
): FastifyInstance {
  const proxy = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: { level: config.logLevel } }),
    // one log line per request costs more than the rest of the gateway's work on it
    logController: new LogController({ disableRequestLogging: true }),
    // the id comes from a trusted proxy only (request-id.ts); Fastify binds it to the request's logger
    genReqId: requestIdGenerator(trust),
    trustProxy: trust,
    rewriteUrl: new Http1Requests(config.maxHeaderCount).rewriteUrl,
    bodyLimit: config.bodyLimitBytes,
    requestTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    http: {
      maxHeaderSize: config.maxHeaderBytes,
      headersTimeout: config.headersTimeoutMs,
      requestTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: connectionsCheckingIntervalMs(config.headersTimeoutMs),
      // the admission hook refuses an HTTP/1.1 request without Host itself, with a code like every other answer
      requireHostHeader: false,
    },
    // the admission hook answers requests that arrive while closing with SLUICE_SHUTTING_DOWN
    return503OnClosing: false,
    clientErrorHandler: (error: Error & { code?: string }, socket: Socket) => {
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      if (socket.writable) socket.end(clientErrorResponse(error, requestIdOn(socket)));
      socket.destroySoon();
    },
  });
  // CONNECT and header lines past MAX_HEADER_COUNT reach the admission hook, `Expect: 100-continue` the limit hook
  adaptNodeServer(proxy, config.maxHeaderCount);
  registerRequestContext(proxy);
  return proxy;
}

/** Fastify's own errors (a Content-Length it cannot read, a body over the limit) as answers with our codes. */
function answerFastifyErrors(bodyLimitBytes: number) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void => {
    const statusCode = error.statusCode && error.statusCode >= 400 ? error.statusCode : 500;
    const details = { requestId: request.id };
    // the upstream's response headers may be on the reply already: the answer is the gateway's JSON
    reply.removeHeader('content-length');
    reply.type('application/json; charset=utf-8');
    if (statusCode >= 500) {
      request.log.error({ err: error }, 'request failed');
      reply.code(500).send(errorBody('SLUICE_INTERNAL', 'internal gateway error', details));
      return;
    }
    if (statusCode === 413) {
      reply.code(413).send(errorBody('SLUICE_BODY_TOO_LARGE', bodyTooLargeMessage(bodyLimitBytes), details));
      return;
    }
    reply.code(400).send(errorBody('SLUICE_BAD_REQUEST', error.message, details));
  };
}

/** The engine's part of the gateway's configuration. */
function engineConfigOf(config: GatewayConfig, slotLeaseMarginMs = SLOT_LEASE_MARGIN_MS): EngineConfig {
  return { ...config, slotLeaseMs: config.upstreamTimeoutMs + slotLeaseMarginMs };
}

function listeningUrl(app: FastifyInstance): string {
  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}
