/**
 * Forwarding (docs/gateway.md): one @fastify/http-proxy per UPSTREAMS entry, routed and forwarded on
 * the normalised path and host (target.ts), with the forwarding headers and the request id
 * (forwarding.ts, request-id.ts), WebSocket handshakes relayed (websocket.ts), and what the exchange
 * of an admitted request learns on the way: the upstream's status, its charge header, the body's
 * bytes, or the gateway's own 502/504. Each entry has its own undici agent (upstream-dispatcher.ts),
 * which ties an upstream request to its exchange.
 *
 * Prefixes match whole segments: the router gives `/orders` the routes `/orders`, `/orders/` and
 * `/orders/*`, never `/ordersx`; `/` takes the rest. The prefix is kept in the forwarded path. An
 * entry naming a host takes only requests for that host; the longest prefix still wins, and at equal
 * prefixes the entry naming the host wins over the one that does not.
 */
import { Transform, type TransformCallback } from 'node:stream';
import httpProxy, { type FastifyHttpProxyOptions } from '@fastify/http-proxy';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import type { UpstreamConfig } from '../config/config.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { PROXY_METHODS, refuseUnrouted, upstreamName } from './admission.js';
import { bodyTooLargeMessage, refuseBodyTooLarge } from './answers.js';
import { errorBody, GatewayError } from './errors.js';
import { type ForwardingOptions, setForwardingHeaders } from './forwarding.js';
import { type ReplyHooks, stripRequestHeaders, stripResponseHeaders } from './header-hygiene.js';
import { REQUEST_ID_HEADER } from './request-id.js';
import { HOST_CONSTRAINT, hostConstraintStrategy } from './target.js';
import { UpstreamDispatcher } from './upstream-dispatcher.js';
import { isWebSocketHandshake, type WebSocketRelays } from './websocket.js';

/** Error codes of a connection that never got a response: the upstream is unreachable (502). */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
  'FST_REPLY_FROM_SERVICE_UNAVAILABLE',
  'FST_REPLY_FROM_BAD_GATEWAY',
]);
/** Error codes of an upstream that did not answer in time (504). */
const TIMEOUT_CODES = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
  'FST_REPLY_FROM_TIMEOUT',
  'FST_REPLY_FROM_HTTP_REQUEST_TIMEOUT',
  'FST_REPLY_FROM_GATEWAY_TIMEOUT',
]);

function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

/**
 * An upstream body that went silent for UPSTREAM_TIMEOUT_MS before its first chunk reached the
 * client: the response has not started, so the client can still get a 504 (Fastify's error handler
 * asks, app.ts). Once it has started, the connection is cut instead.
 */
export function isUpstreamSilence(error: unknown): boolean {
  return errorCodes(error).includes('UND_ERR_BODY_TIMEOUT');
}

function findStatus(error: unknown): number | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof GatewayError) return current.statusCode;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

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

/** The upstream answered: the exchange learns the status (refund, charge) and, for bytes, counts the body. */
const onUpstreamResponse: NonNullable<ReplyHooks['onResponse']> = (request, reply, res) => {
  const exchange = request.sluice?.exchange;
  if (exchange !== undefined) {
    // a HEAD has no body and a quicker answer: it must not buy the GET's answer below its admission cost
    if (request.method === 'HEAD') exchange.keepAdmissionCost();
    exchange.responded(res.statusCode);
    if (exchange.countsBytes) {
      // a listener beside the pipe: the body streams untouched (pausing the pipe pauses this too)
      res.stream.on('data', (chunk: Buffer) => {
        exchange.bytes += chunk.length;
      });
    }
  }
  reply.send(res.stream);
};

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
  const dispatchers: UpstreamDispatcher[] = [];
  app.addHook('onClose', async () => {
    await Promise.all(dispatchers.map((dispatcher) => dispatcher.destroy()));
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
    const upstreamErrors = metrics.upstreamErrorCounters(name);
    const onError: NonNullable<ReplyHooks['onError']> = (reply, { error }) => {
      if (findStatus(error) === 413) {
        refuseBodyTooLarge(reply, bodyLimitBytes);
        return;
      }
      const context = reply.request.sluice;
      // the client went away and the gateway aborted the upstream request: nobody to answer, nothing failed
      if (context?.clientDone) return;
      const exchange = context?.exchange;
      const codes = errorCodes(error);
      if (codes.some((c) => TIMEOUT_CODES.has(c))) {
        upstreamErrors.timeout.inc();
        exchange?.failed(504);
        reply
          .code(504)
          .send(
            errorBody(
              'SLUICE_UPSTREAM_TIMEOUT',
              `upstream ${name} did not answer within ${upstreamTimeoutMs} ms`,
              { requestId: reply.request.id },
            ),
          );
        return;
      }
      const unreachable = codes.some((c) => UNREACHABLE_CODES.has(c));
      (unreachable ? upstreamErrors.unreachable : upstreamErrors.error).inc();
      exchange?.failed(502);
      reply.log.warn({ err: error, upstream: name }, 'upstream request failed');
      reply
        .code(502)
        .send(
          errorBody(
            'SLUICE_UPSTREAM_UNREACHABLE',
            unreachable ? `upstream ${name} is unreachable` : `upstream ${name} failed`,
            { requestId: reply.request.id },
          ),
        );
    };

    const dispatcher = new UpstreamDispatcher({
      timeoutMs: upstreamTimeoutMs,
      agent: {
        connections: 128,
        pipelining: 1,
        bodyTimeout: upstreamTimeoutMs,
        connect: { timeout: Math.min(upstreamTimeoutMs, 10_000) },
      },
    });
    dispatchers.push(dispatcher);
    const preserveHost = upstream.preserveHost === true;
    const rewriteRequestHeaders: NonNullable<ReplyHooks['rewriteRequestHeaders']> = (request, headers) => {
      stripRequestHeaders(request, headers);
      // reply-from types its hooks for any server; the proxy listener is HTTP/1.1
      const proxied = request as FastifyRequest;
      setForwardingHeaders(proxied, headers, forwarding, preserveHost);
      headers[REQUEST_ID_HEADER] = request.id;
      // reply-from sends the request right after this hook returns
      dispatcher.bind(proxied);
      return headers;
    };

    const proxyOptions: FastifyHttpProxyOptions = {
      upstream: upstream.origin,
      prefix: upstream.prefix === '/' ? undefined : upstream.prefix,
      // keep the prefix in the forwarded path
      rewritePrefix: upstream.prefix === '/' ? '' : upstream.prefix,
      httpMethods: PROXY_METHODS,
      ...(upstream.host === undefined ? {} : { constraints: { [HOST_CONSTRAINT]: upstream.host } }),
      // our content-type parser above streams every body
      proxyPayloads: false,
      disableRequestLogging: true,
      // reply-from takes any object with a `request` method as its undici dispatcher
      undici: dispatcher as unknown as { request: Dispatcher['request'] },
      handler: (request, reply, dest, replyOptions) =>
        isWebSocketHandshake(request.raw)
          ? webSockets.relay(request, reply, { origin: upstream.origin, path: dest, preserveHost })
          : reply.from(dest, replyOptions),
      replyOptions: {
        rewriteRequestHeaders,
        rewriteHeaders: stripResponseHeaders,
        onResponse: onUpstreamResponse,
        onError,
        // never replay a request on the client's behalf (reply-from retries GETs on a 503 by default)
        retryDelay: () => null,
      },
    };
    await app.register(httpProxy, proxyOptions);
  }

  // the admission hook answers every unrouted request before this runs; kept so nothing reaches Fastify's own 404
  app.setNotFoundHandler((request, reply) => refuseUnrouted(request, reply, options.upstreams, metrics));
}
