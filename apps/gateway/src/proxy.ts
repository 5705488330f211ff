/**
 * Forwarding (docs/gateway.md): one @fastify/http-proxy per UPSTREAMS entry, routed and
 * forwarded on the NORMALISED path and host.
 *
 * Fastify routes on `req.url` before any hook runs, so normalising in a hook would be too late:
 * `/orders/../admin` would already be routed to the `/orders` upstream. `rewriteTarget` runs as
 * Fastify's `rewriteUrl`, before routing: it normalises the request-target and the Host once,
 * stashes both on the raw request, and hands the router `<normalised path>?<original query>`. The
 * router's host constraint and the rule matcher read the stashed host, never the raw header, so
 * routing and matching cannot disagree about either. An unsafe target or host is routed to a fixed
 * internal URL and answered 400 by the first onRequest hook (`admitRequest`), never proxied.
 *
 * Prefixes match whole segments: the router gives `/orders` the routes `/orders`, `/orders/` and
 * `/orders/*`, never `/ordersx`; `/` takes the rest. The prefix is kept in the forwarded path. An
 * entry naming a host takes only requests for that host; the longest prefix still wins, and at equal
 * prefixes the entry naming the host wins over the one that does not.
 */
import type { IncomingMessage } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import httpProxy, { type FastifyHttpProxyOptions } from '@fastify/http-proxy';
import { type NormalizedHost, type NormalizedTarget, normalizeHost, normalizePath } from '@sluice/shared';
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { forwardedClientIp } from './client-key.js';
import type { UpstreamConfig } from './config.js';
import {
  type ErrorDetails,
  errorBody,
  GATEWAY_ERRORS,
  GatewayError,
  type GatewayErrorCode,
} from './errors.js';
import type { GatewayMetrics } from './metrics.js';

/** The request's Host as the gateway reads it: normalised, or why it is refused. */
export type RequestHost =
  | NormalizedHost
  | { ok: false; code: 'HOST_DUPLICATE' | 'HOST_MISSING'; message: string };

const kTarget = Symbol('sluice.target');
const kHost = Symbol('sluice.host');
const kLimited = Symbol('sluice.limited');
type GatewayRawRequest = IncomingMessage & {
  [kTarget]?: NormalizedTarget;
  [kHost]?: RequestHost;
  [kLimited]?: boolean;
};

/** Where an unsafe request-target is routed; the onRequest hook answers it 400 before any handler. */
const UNSAFE_TARGET_URL = '/';

const DUPLICATE_HOST: RequestHost = Object.freeze({
  ok: false,
  code: 'HOST_DUPLICATE',
  message: 'a request must carry exactly one Host header (RFC 9112 §3.2)',
});

const MISSING_HOST: RequestHost = Object.freeze({
  ok: false,
  code: 'HOST_MISSING',
  message: 'an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2)',
});

/** Fastify `rewriteUrl`: normalise the target and the host once, route and forward on the result. */
export function rewriteTarget(req: IncomingMessage): string {
  const target = normalizePath(req.url ?? '');
  const host = requestHost(req);
  (req as GatewayRawRequest)[kTarget] = target;
  (req as GatewayRawRequest)[kHost] = host;
  if (!target.ok || !host.ok) return UNSAFE_TARGET_URL;
  return target.query === '' ? target.path : `${target.path}?${target.query}`;
}

/**
 * Node keeps the first of several Host headers in `req.headers` and drops the rest, so only the raw
 * header list shows a second one: an upstream or a cache in front of us might read the other.
 */
function requestHost(req: IncomingMessage): RequestHost {
  const raw = req.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host' && ++seen > 1) return DUPLICATE_HOST;
  }
  // HTTP/1.0 may omit Host (it then names no host); Node's own check is off so that this answer,
  // like every other, carries a code (see app.ts)
  if (seen === 0 && req.httpVersionMajor === 1 && req.httpVersionMinor >= 1) return MISSING_HOST;
  return normalizeHost(req.headers.host);
}

/** The normalised target `rewriteTarget` stashed on the request. */
export function targetOf(req: IncomingMessage): NormalizedTarget | undefined {
  return (req as GatewayRawRequest)[kTarget];
}

/**
 * The normalised host `rewriteTarget` stashed on the request (lower case, no port, no trailing dot),
 * or undefined when the request names none: what routing used, and what the rule matcher must use.
 */
export function hostOf(req: IncomingMessage): string | undefined {
  const host = (req as GatewayRawRequest)[kHost];
  return host?.ok && host.host !== '' ? host.host : undefined;
}

/** The router's host constraint: an entry naming a host is registered under it (see module comment). */
const HOST_CONSTRAINT = 'sluiceHost';
type ConstraintStrategy = Parameters<FastifyInstance['addConstraintStrategy']>[0];
type RouteHandler = NonNullable<ReturnType<ReturnType<ConstraintStrategy['storage']>['get']>>;
const hostConstraintStrategy: ConstraintStrategy = {
  name: HOST_CONSTRAINT,
  // a request for a host no entry names falls back to the entries that name none
  mustMatchWhenDerived: false,
  storage() {
    const hosts = new Map<string, RouteHandler>();
    return {
      get: (host: string) => hosts.get(host) ?? null,
      set: (host: string, handler: RouteHandler) => {
        hosts.set(host, handler);
      },
    };
  },
  deriveConstraint: (req: IncomingMessage) => hostOf(req) ?? '',
};

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
    // the upstream's price of the request is for the gateway only (docs/lifecycle.md)
    const exchange = request.exchange;
    const chargeHeader = exchange?.rule.charge?.header;
    if (chargeHeader !== undefined) {
      exchange!.chargeHeader = headers[chargeHeader];
      delete headers[chargeHeader];
    }
  }
  return headers;
};

/** The upstream answered: the exchange learns the status (refund, charge) and, for bytes, counts the body. */
const onUpstreamResponse: NonNullable<ReplyHooks['onResponse']> = (request, reply, res) => {
  const exchange = request.exchange;
  if (exchange !== null) {
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

/** How an UPSTREAMS entry is named in metrics and messages: `/orders`, `api.example.com/orders`. */
export function upstreamName(upstream: UpstreamConfig): string {
  return upstream.host === undefined ? upstream.prefix : `${upstream.host}${upstream.prefix}`;
}

/** Whether an entry takes a request for `host` (undefined: none) and normalised `path`. */
function takes(upstream: UpstreamConfig, host: string | undefined, path: string): boolean {
  if (upstream.host !== undefined && upstream.host !== host) return false;
  const prefix = upstream.prefix;
  return prefix === '/' || path === prefix || path.startsWith(`${prefix}/`);
}

/**
 * Registers the body pass-through, one proxy per upstream, and the 404 for paths no prefix takes.
 * Call after the onRequest hooks are added, so every route inherits them.
 */
export async function registerProxies(app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { metrics, bodyLimitBytes, upstreamTimeoutMs } = options;
  // the typed per-request context of an admitted request's lifecycle (exchange.ts)
  if (!app.hasRequestDecorator('exchange')) app.decorateRequest('exchange', null);

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
    const upstreamErrors = {
      unreachable: metrics.upstreamErrors.labels(name, 'unreachable'),
      timeout: metrics.upstreamErrors.labels(name, 'timeout'),
      error: metrics.upstreamErrors.labels(name, 'error'),
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
        reply.request.exchange?.failed(504);
        reply
          .code(504)
          .send(
            errorBody(
              'SLUICE_UPSTREAM_TIMEOUT',
              `upstream ${name} did not answer within ${upstreamTimeoutMs} ms`,
            ),
          );
        return;
      }
      const unreachable = codes.some((c) => UNREACHABLE_CODES.has(c));
      (unreachable ? upstreamErrors.unreachable : upstreamErrors.error).inc();
      reply.request.exchange?.failed(502);
      reply.log.warn({ err: error, upstream: name }, 'upstream request failed');
      reply
        .code(502)
        .send(
          errorBody(
            'SLUICE_UPSTREAM_UNREACHABLE',
            unreachable ? `upstream ${name} is unreachable` : `upstream ${name} failed`,
          ),
        );
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
        onResponse: onUpstreamResponse,
        onError,
        // never replay a request on the client's behalf (reply-from retries GETs on a 503 by default)
        retryDelay: () => null,
      },
    };
    await app.register(httpProxy, proxyOptions);
  }

  // `admitRequest` answers every unrouted request before this runs; kept so nothing reaches Fastify's own 404
  app.setNotFoundHandler((request, reply) => refuseUnrouted(request, reply, options.upstreams, metrics));
}

/** 405 when an entry takes the path (only the method has no route), else 404. */
function refuseUnrouted(
  request: FastifyRequest,
  reply: FastifyReply,
  upstreams: readonly UpstreamConfig[],
  metrics: GatewayMetrics,
): void {
  const target = targetOf(request.raw);
  const path = target?.ok ? target.path : request.url;
  const host = hostOf(request.raw);
  if (upstreams.some((u) => takes(u, host, path))) {
    metrics.badRequests.labels('SLUICE_METHOD_NOT_ALLOWED').inc();
    reply.header('allow', PROXY_METHODS.join(', '));
    refuse(reply, 'SLUICE_METHOD_NOT_ALLOWED', `method ${request.method} is not proxied`);
    return;
  }
  metrics.badRequests.labels('SLUICE_NO_UPSTREAM').inc();
  refuse(reply, 'SLUICE_NO_UPSTREAM', `no upstream serves ${host === undefined ? path : `${host}${path}`}`);
}

/** Answers a refused request; one that may still be sending a body gets its connection closed. */
function refuse(reply: FastifyReply, code: GatewayErrorCode, message: string, details?: ErrorDetails): void {
  closeIfBodyPending(reply.request.raw, reply);
  reply.code(GATEWAY_ERRORS[code]).send(errorBody(code, message, details));
}

/**
 * A refused request may still be sending its body. It is never read: the connection is closed after
 * the answer instead of being kept alive behind a body nobody wants.
 */
export function closeIfBodyPending(raw: IncomingMessage, reply: FastifyReply): void {
  if (raw.complete) return;
  const headers = raw.headers;
  if (headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0') {
    reply.header('connection', 'close');
  }
}

export interface AdmissionOptions {
  upstreams: readonly UpstreamConfig[];
  metrics: GatewayMetrics;
  /** true when TRUST_PROXY lets forwarding headers name the client */
  trustProxy: boolean;
  /** true once the gateway is shutting down */
  isClosing: () => boolean;
  /** largest request body the gateway proxies: a larger declared `Content-Length` is refused (413) */
  bodyLimitBytes: number;
}

/**
 * The first onRequest hook: everything the gateway refuses without a decision, so a request that
 * will not be proxied never costs a token. In order: shutting down (503), an unsafe target or host
 * (400), no route (404, or 405 for a method no route takes), a forwarding header naming no client
 * (400), a declared body over BODY_LIMIT_BYTES (413; a chunked one is cut while it streams). Then it holds a pipelined request until the responses before it on its connection are
 * done: if one of them closes the connection, Node never answers this request, so it must not
 * reach an upstream (or be charged) either.
 */
export function admitRequest(options: AdmissionOptions) {
  const { upstreams, metrics, trustProxy, isClosing, bodyLimitBytes } = options;
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const raw = request.raw as GatewayRawRequest;
    if (isClosing()) {
      metrics.badRequests.labels('SLUICE_SHUTTING_DOWN').inc();
      reply.header('connection', 'close');
      refuse(reply, 'SLUICE_SHUTTING_DOWN', 'the gateway is shutting down; retry on another instance');
      return;
    }
    const target = raw[kTarget];
    if (target === undefined || !target.ok) {
      const reason = target?.ok === false ? target.code : 'PATH_NOT_ORIGIN_FORM';
      metrics.badRequests.labels(reason).inc();
      refuse(
        reply,
        'SLUICE_BAD_PATH',
        target?.ok === false ? target.message : 'request-target could not be read',
        {
          reason,
        },
      );
      return;
    }
    const host = raw[kHost];
    if (host !== undefined && !host.ok) {
      metrics.badRequests.labels(host.code).inc();
      refuse(reply, 'SLUICE_BAD_HOST', host.message, { reason: host.code });
      return;
    }
    if (request.is404) {
      refuseUnrouted(request, reply, upstreams, metrics);
      return;
    }
    if (trustProxy && forwardedClientIp(request.ip) === undefined) {
      metrics.badRequests.labels('SLUICE_BAD_FORWARDED_FOR').inc();
      refuse(
        reply,
        'SLUICE_BAD_FORWARDED_FOR',
        'the client address a trusted proxy forwarded is not an IP address in canonical form',
      );
      return;
    }
    const contentLength = raw.headers['content-length'];
    if (contentLength !== undefined && Number(contentLength) > bodyLimitBytes) {
      metrics.badRequests.labels('SLUICE_BODY_TOO_LARGE').inc();
      reply.header('connection', 'close');
      refuse(reply, 'SLUICE_BODY_TOO_LARGE', `request body is larger than ${bodyLimitBytes} bytes`);
      return;
    }
    const response = reply.raw;
    const socket = raw.socket;
    if (response.socket != null) {
      if (closingConnection(socket)) dropPipelined(request);
      else done();
      return;
    }
    // An earlier response on this connection is still going out: this one waits for its turn, which
    // never comes if that response closes the connection.
    const onTurn = () => {
      socket.off('close', onClose);
      if (closingConnection(socket)) dropPipelined(request);
      else done();
    };
    const onClose = () => {
      response.off('socket', onTurn);
      dropPipelined(request);
    };
    response.once('socket', onTurn);
    socket.once('close', onClose);
  };
}

/** True once an answer on this connection decided to close it (Node ends the socket after sending it). */
function closingConnection(socket: IncomingMessage['socket']): boolean {
  return socket.destroyed || socket.writableEnded;
}

/** A request read behind an answer that closed its connection: nobody will read its answer. */
function dropPipelined(request: FastifyRequest): void {
  request.log.debug('request pipelined behind a closing answer: not proxied');
}
