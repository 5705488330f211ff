/**
 * Forwarding (SPEC §4 "Admitted"): one @fastify/http-proxy per UPSTREAMS prefix, routed and
 * forwarded on the NORMALISED path.
 *
 * Fastify routes on `req.url` before any hook runs, so normalising in a hook would be too late:
 * `/orders/../admin` would already be routed to the `/orders` upstream. `rewriteTarget` runs as
 * Fastify's `rewriteUrl`, before routing: it normalises the request-target once, stashes the result
 * on the raw request, and hands the router `<normalised path>?<original query>`. An unsafe target
 * is routed to a fixed internal URL and answered 400 by the first onRequest hook, never proxied.
 *
 * Prefixes match whole segments: the router gives `/orders` the routes `/orders`, `/orders/` and
 * `/orders/*`, never `/ordersx`; `/` takes the rest. The prefix is kept in the forwarded path.
 */
import type { IncomingMessage } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import httpProxy, { type FastifyHttpProxyOptions } from '@fastify/http-proxy';
import { type NormalizedTarget, normalizePath } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import type { UpstreamConfig } from './config.js';
import { errorBody, GatewayError } from './errors.js';
import type { GatewayMetrics } from './metrics.js';

const kTarget = Symbol('sluice.target');
const kLimited = Symbol('sluice.limited');
type GatewayRawRequest = IncomingMessage & { [kTarget]?: NormalizedTarget; [kLimited]?: boolean };

/** Where an unsafe request-target is routed; the onRequest hook answers it 400 before any handler. */
const UNSAFE_TARGET_URL = '/';

/** Fastify `rewriteUrl`: normalise once, route and forward on the result. */
export function rewriteTarget(req: IncomingMessage): string {
  const target = normalizePath(req.url ?? '');
  (req as GatewayRawRequest)[kTarget] = target;
  if (!target.ok) return UNSAFE_TARGET_URL;
  return target.query === '' ? target.path : `${target.path}?${target.query}`;
}

/** The normalised target `rewriteTarget` stashed on the request. */
export function targetOf(req: IncomingMessage): NormalizedTarget | undefined {
  return (req as GatewayRawRequest)[kTarget];
}

/** Marks a request a rule applied to, so the upstream's own RateLimit headers cannot override ours. */
export function markLimited(req: IncomingMessage): void {
  (req as GatewayRawRequest)[kLimited] = true;
}

/** Request headers that describe this hop only (RFC 9110 §7.6.1), never forwarded upstream. */
const HOP_BY_HOP_REQUEST = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  // Node answers `Expect: 100-continue` itself; forwarding it would make the upstream wait for a body twice
  'expect',
];
/** Response headers that describe the upstream's hop only, never sent to the client. */
const HOP_BY_HOP_RESPONSE = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
];

function connectionTokens(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const text = Array.isArray(value) ? value.join(',') : value;
  return text
    .toLowerCase()
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

type ReplyHooks = NonNullable<FastifyHttpProxyOptions['replyOptions']>;

const stripRequestHeaders: NonNullable<ReplyHooks['rewriteRequestHeaders']> = (request, headers) => {
  // reply-from already dropped `connection` and the names it lists (from a copy of the headers)
  for (const name of connectionTokens(request.headers.connection)) delete headers[name];
  for (const name of HOP_BY_HOP_REQUEST) delete headers[name];
  // A body the gateway does not forward (GET/HEAD, or none parsed) must not be announced upstream.
  if (request.body == null) delete headers['content-length'];
  return headers;
};

const stripResponseHeaders: NonNullable<ReplyHooks['rewriteHeaders']> = (headers, request) => {
  const listed = headers.connection;
  if (listed !== undefined) for (const name of connectionTokens(listed)) delete headers[name];
  for (const name of HOP_BY_HOP_RESPONSE) delete headers[name];
  if (request && (request.raw as GatewayRawRequest)[kLimited]) {
    delete headers.ratelimit;
    delete headers['ratelimit-policy'];
  }
  return headers;
};

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
      callback(
        new GatewayError('SLUICE_BODY_TOO_LARGE', `request body is larger than ${this.limitBytes} bytes`),
      );
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
}

/** Every method a proxied route accepts. */
const PROXY_METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'];

/**
 * Registers the body pass-through, one proxy per upstream, and the 404 for paths no prefix takes.
 * Call after the onRequest hooks are added, so every route inherits them.
 */
export async function registerProxies(app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { metrics, bodyLimitBytes, upstreamTimeoutMs } = options;

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

  for (const upstream of options.upstreams) {
    const upstreamErrors = {
      unreachable: metrics.upstreamErrors.labels(upstream.prefix, 'unreachable'),
      timeout: metrics.upstreamErrors.labels(upstream.prefix, 'timeout'),
      error: metrics.upstreamErrors.labels(upstream.prefix, 'error'),
    };
    const onError: NonNullable<ReplyHooks['onError']> = (reply, { error }) => {
      const status = findStatus(error);
      if (status === 413) {
        reply.header('connection', 'close');
        reply
          .code(413)
          .send(errorBody('SLUICE_BODY_TOO_LARGE', `request body is larger than ${bodyLimitBytes} bytes`));
        return;
      }
      const codes = errorCodes(error);
      if (codes.some((c) => TIMEOUT_CODES.has(c))) {
        upstreamErrors.timeout.inc();
        reply
          .code(504)
          .send(
            errorBody(
              'SLUICE_UPSTREAM_TIMEOUT',
              `upstream ${upstream.prefix} did not answer within ${upstreamTimeoutMs} ms`,
            ),
          );
        return;
      }
      const unreachable = codes.some((c) => UNREACHABLE_CODES.has(c));
      (unreachable ? upstreamErrors.unreachable : upstreamErrors.error).inc();
      reply.log.warn({ err: error, upstream: upstream.prefix }, 'upstream request failed');
      reply
        .code(502)
        .send(
          errorBody(
            'SLUICE_UPSTREAM_UNREACHABLE',
            unreachable ? `upstream ${upstream.prefix} is unreachable` : `upstream ${upstream.prefix} failed`,
          ),
        );
    };

    const proxyOptions: FastifyHttpProxyOptions = {
      upstream: upstream.origin,
      prefix: upstream.prefix === '/' ? undefined : upstream.prefix,
      // keep the prefix in the forwarded path
      rewritePrefix: upstream.prefix === '/' ? '' : upstream.prefix,
      httpMethods: PROXY_METHODS,
      // our content-type parser above streams every body
      proxyPayloads: false,
      disableRequestLogging: true,
      undici: {
        connections: 128,
        pipelining: 1,
        headersTimeout: upstreamTimeoutMs,
        bodyTimeout: upstreamTimeoutMs,
        connect: { timeout: Math.min(upstreamTimeoutMs, 10_000) },
      },
      replyOptions: {
        rewriteRequestHeaders: stripRequestHeaders,
        rewriteHeaders: stripResponseHeaders,
        onError,
        // never replay a request on the client's behalf (reply-from retries GETs on a 503 by default)
        retryDelay: () => null,
      },
    };
    await app.register(httpProxy, proxyOptions);
  }

  app.setNotFoundHandler((request, reply) => {
    const target = targetOf(request.raw);
    const path = target?.ok ? target.path : request.url;
    const routed = options.upstreams.some(
      (u) => u.prefix === '/' || path === u.prefix || path.startsWith(`${u.prefix}/`),
    );
    if (routed) {
      metrics.badRequests.labels('SLUICE_METHOD_NOT_ALLOWED').inc();
      reply.header('allow', PROXY_METHODS.join(', '));
      reply.code(405).send(errorBody('SLUICE_METHOD_NOT_ALLOWED', `method ${request.method} is not proxied`));
      return;
    }
    metrics.badRequests.labels('SLUICE_NO_UPSTREAM').inc();
    reply.code(404).send(errorBody('SLUICE_NO_UPSTREAM', `no upstream serves ${path}`));
  });
}
