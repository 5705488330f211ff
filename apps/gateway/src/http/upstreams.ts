/**
 * Forwarding (docs/gateway.md): routes per UPSTREAMS entry, routed and forwarded on the normalised
 * path and host (target.ts), each request forwarded by an upstream call (upstream-call.ts: the
 * forwarding headers and request id, what the exchange of an admitted request learns on the way, the
 * gateway's own 502/504) on the entry's own undici pool, WebSocket handshakes relayed (websocket.ts).
 *
 * Prefixes match whole segments: the router gives `/orders` the routes `/orders`, `/orders/` and
 * `/orders/*`, never `/ordersx`; `/` takes the rest. The prefix is kept in the forwarded path. An
 * entry naming a host takes only requests for that host; the longest prefix still wins, and at equal
 * prefixes the entry naming the host wins over the one that does not.
 */
import { Transform, type TransformCallback } from 'node:stream';
import type { FastifyInstance, RouteHandlerMethod } from 'fastify';
import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/config.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { PROXY_METHODS, refuseUnrouted, upstreamName } from './admission.js';
import { bodyTooLargeMessage } from './answers.js';
import { GatewayError } from './errors.js';
import type { ForwardingOptions } from './forwarding.js';
import { HOST_CONSTRAINT, hostConstraintStrategy } from './node-http1.js';
import { BACKSTOP_MS, forward, type UpstreamTarget } from './upstream-call.js';
import type { WebSocketRelays } from './websocket.js';

/**
 * A request body stream that fails with 413 past `limitBytes`. Only chunked bodies need it: a
 * Content-Length over the limit is refused before anything is read.
 */
class BodyLimit extends Transform {
  #seen = 0;
  constructor(readonly limitBytes: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.limitBytes) {
      callback(new GatewayError('SLUICE_BODY_TOO_LARGE', bodyTooLargeMessage(this.limitBytes)));
      return;
    }
    callback(null, chunk);
  }
}

export interface ProxyOptions {
  upstreams: readonly UpstreamConfig[];
  upstreamTimeoutMs: number;
  bodyLimitBytes: number;
  metrics: GatewayMetrics;
  /** which forwarding headers to write, and which hops to believe */
  forwarding: ForwardingOptions;
  /** where admitted WebSocket handshakes go */
  webSockets: WebSocketRelays;
}

/**
 * Registers the body pass-through, one proxy per upstream, and the 404 for paths no prefix takes.
 * Call after the onRequest hooks are added, so every route inherits them.
 */
export async function registerUpstreams(app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { metrics, bodyLimitBytes, upstreamTimeoutMs, forwarding, webSockets } = options;
  const pools: Pool[] = [];
  app.addHook('onClose', async () => {
    await Promise.all(pools.map((pool) => pool.destroy()));
  });

  // Bodies are never parsed: they stream to the upstream as they arrive (and only once admitted).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (request, payload, done) => {
    const length = request.headers['content-length'];
    if (length !== undefined) {
      // Node has checked the header is one decimal number; the body cannot exceed it.
      done(null, payload);
      return;
    }
    const limited = new BodyLimit(bodyLimitBytes);
    payload.on('error', (error) => limited.destroy(error));
    done(null, payload.pipe(limited));
  });

  if (options.upstreams.some((u) => u.host !== undefined)) app.addConstraintStrategy(hostConstraintStrategy);

  for (const upstream of options.upstreams) {
    const name = upstreamName(upstream);
    const origin = new URL(upstream.origin);
    const pool = new Pool(upstream.origin, {
      connections: 128,
      pipelining: 1,
      headersTimeout: upstreamTimeoutMs + BACKSTOP_MS,
      bodyTimeout: upstreamTimeoutMs,
      connect: { timeout: Math.min(upstreamTimeoutMs, 10_000) },
    });
    pools.push(pool);
    const target: UpstreamTarget = {
      name,
      pool,
      host: origin.host,
      preserveHost: upstream.preserveHost === true,
      timeoutMs: upstreamTimeoutMs,
      bodyLimitBytes,
      forwarding,
      errors: metrics.upstreamErrorCounters(name),
    };
    const handler: RouteHandlerMethod = (request, reply) => {
      const context = request.sluice;
      if (context?.transport.webSocket) {
        webSockets.relay(request, reply, {
          origin: upstream.origin,
          // the relay adds the query itself
          path: context.path,
          preserveHost: target.preserveHost,
        });
      } else forward(request, reply, target);
    };
    const constraints = upstream.host === undefined ? undefined : { [HOST_CONSTRAINT]: upstream.host };
    // whole segments: `/orders` takes `/orders`, `/orders/` and `/orders/…`, never `/ordersx`
    const urls =
      upstream.prefix === '/'
        ? ['/', '/*']
        : [upstream.prefix, `${upstream.prefix}/`, `${upstream.prefix}/*`];
    for (const url of urls) {
      app.route({
        method: PROXY_METHODS,
        url,
        handler,
        ...(constraints === undefined ? {} : { constraints }),
      });
    }
  }

  // the admission hook answers every unrouted request before this runs; kept so nothing reaches Fastify's own 404
  app.setNotFoundHandler((request, reply) => refuseUnrouted(request, reply, options.upstreams, metrics));
}
