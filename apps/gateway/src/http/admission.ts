/**
 * The first onRequest hook: the response's X-Request-Id (request-id.ts), then everything the gateway
 * refuses without a decision, so a request that will not be proxied never costs a token. In order:
 * shutting down (503), a request refused from its head, as its transport read it (node-http1.ts: CONNECT
 * 405, HTTP/0.9 400, too many header lines 431, an unsafe target or host 400), no route (404, or 405
 * for a method no route takes), a forwarding header naming no client (400), a declared body over
 * BODY_LIMIT_BYTES (413; a chunked one is cut while it streams). A request that passes gets its
 * context (`request.sluice`). Then the hook holds a pipelined request until the
 * responses before it on its connection are done: if one of them closes the connection, Node never
 * answers this request, so it must not reach an upstream (or be charged) either.
 */
import { forwardedClientIp } from '@sluice/shared';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { UpstreamConfig } from '../config/config.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { refuse, refuseBodyTooLarge } from './answers.js';
import { transportOf } from './node-http1.js';
import { RequestContext } from './request-context.js';
import { REQUEST_ID_HEADER } from './request-id.js';

/** Every method a proxied route accepts. */
export const PROXY_METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'];
/** The `Allow` header of a 405. */
const ALLOW = PROXY_METHODS.join(', ');

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

/** The normalised path of a request the transport let through (its `req.url` without the query). */
function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** 405 when an entry takes the path (only the method has no route), else 404. */
export function refuseUnrouted(
  request: FastifyRequest,
  reply: FastifyReply,
  upstreams: readonly UpstreamConfig[],
  metrics: GatewayMetrics,
): void {
  const path = pathOf(request.raw.url ?? '/');
  const host = transportOf(request.raw).authority;
  if (upstreams.some((u) => takes(u, host, path))) {
    metrics.badRequests.labels('SLUICE_METHOD_NOT_ALLOWED').inc();
    reply.header('allow', ALLOW);
    refuse(reply, 'SLUICE_METHOD_NOT_ALLOWED', `method ${request.method} is not proxied`);
    return;
  }
  metrics.badRequests.labels('SLUICE_NO_UPSTREAM').inc();
  refuse(reply, 'SLUICE_NO_UPSTREAM', `no upstream serves ${host === undefined ? path : `${host}${path}`}`);
}

export interface AdmissionOptions {
  upstreams: readonly UpstreamConfig[];
  metrics: GatewayMetrics;
  /** true when TRUST_PROXY lets forwarding headers name the client (then `request.ip` is the client) */
  trustProxy: boolean;
  /** true once the gateway is shutting down */
  isClosing: () => boolean;
  /** largest request body the gateway proxies: a larger declared `Content-Length` is refused (413) */
  bodyLimitBytes: number;
}

export function admitRequest(options: AdmissionOptions) {
  const { upstreams, metrics, trustProxy, isClosing, bodyLimitBytes } = options;
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const raw = request.raw;
    reply.header(REQUEST_ID_HEADER, request.id);
    // Node may answer a request whose body fails (a timeout, bad chunking) on the bare socket, where
    // only the raw response is at hand (app.ts): it carries the id too
    if (!raw.complete) reply.raw.setHeader(REQUEST_ID_HEADER, request.id);
    if (isClosing()) {
      metrics.badRequests.labels('SLUICE_SHUTTING_DOWN').inc();
      reply.header('connection', 'close');
      refuse(reply, 'SLUICE_SHUTTING_DOWN', 'the gateway is shutting down; retry on another instance');
      return;
    }
    const transport = transportOf(raw);
    const refusal = transport.refusal;
    if (refusal !== undefined) {
      metrics.badRequests.labels(refusal.reason ?? refusal.code).inc();
      if (refusal.code === 'SLUICE_METHOD_NOT_ALLOWED') reply.header('allow', ALLOW);
      refuse(
        reply,
        refusal.code,
        refusal.message,
        refusal.reason === undefined ? undefined : { reason: refusal.reason },
      );
      return;
    }
    if (request.is404) {
      refuseUnrouted(request, reply, upstreams, metrics);
      return;
    }
    const clientAddress = trustProxy ? forwardedClientIp(request.ip) : transport.peer.address;
    if (trustProxy && clientAddress === undefined) {
      metrics.badRequests.labels('SLUICE_BAD_FORWARDED_FOR').inc();
      refuse(
        reply,
        'SLUICE_BAD_FORWARDED_FOR',
        'the client address a trusted proxy forwarded is not an IP address in canonical form',
      );
      return;
    }
    const contentLength = transport.headers['content-length'];
    if (contentLength !== undefined && Number(contentLength) > bodyLimitBytes) {
      metrics.badRequests.labels('SLUICE_BODY_TOO_LARGE').inc();
      refuseBodyTooLarge(reply, bodyLimitBytes);
      return;
    }
    request.sluice = new RequestContext(
      transport,
      transport.method,
      transport.authority,
      pathOf(raw.url ?? ''),
      clientAddress,
    );
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
function closingConnection(socket: FastifyRequest['raw']['socket']): boolean {
  return socket.destroyed || socket.writableEnded;
}

/** A request read behind an answer that closed its connection: nobody will read its answer. */
function dropPipelined(request: FastifyRequest): void {
  request.log.debug('request pipelined behind a closing answer: not proxied');
}
