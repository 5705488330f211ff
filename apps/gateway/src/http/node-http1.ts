/**
 * The HTTP/1.1 front door: the one file that knows Node's HTTP/1.1 server beyond its public API. It
 * turns each `IncomingMessage` into the gateway's transport-neutral request (transport-request.ts),
 * reading the request-target, the Host and the request line once, before routing. What else it
 * leans on, and why each is needed:
 *
 * - `rewriteUrl` (`Http1Requests.rewriteUrl`): Fastify routes on `req.url` before any hook runs, so
 *   normalising in a hook would be too late (`/orders/../admin` would already be routed to the
 *   `/orders` upstream). The router gets `<normalised path>?<original query>`. A request refused
 *   from its head carries its refusal as a value (`refusal`), answered by the admission hook before
 *   any route's handler: what it is routed to does not matter.
 * - `server.maxHeadersCount = n + 1`: Node keeps at most that many header lines and drops the rest
 *   without a word (a condition or exemption header among them would be lost). Keeping one more than
 *   MAX_HEADER_COUNT makes every request Node cut one refused here (431).
 * - `rawHeaders`: Node keeps the first of several Host (or X-Request-Id) lines in `req.headers` and
 *   drops or joins the rest; only the raw list shows a second one, which an upstream might read.
 * - `httpVersionMajor === 0`: Node's parser takes `GET /path` (no version) as HTTP/0.9 and would
 *   let it through as if it were HTTP/1.x: refused 400.
 * - `'connect'` and `'upgrade'` with `app.routing()` re-injection: Node hands CONNECT and upgrade
 *   requests over with their socket instead of answering them (CONNECT without a listener: the
 *   socket is destroyed and the client gets no answer). They are routed through Fastify as the
 *   'request' event would, so they are normalised, admitted and decided like any other.
 * - `socket._httpMessage`: the answer Node is writing on a connection. A handed-over request may be
 *   pipelined behind answers still being written; giving it the socket then would throw
 *   ERR_HTTP_SOCKET_ASSIGNED out of the event listener, killing the process, so it waits for its
 *   turn. Node's client-error path gives only the socket, so the id of the request whose body failed
 *   is read from that pending answer too.
 * - `req.upgrade`: set (undeclared in Node's types) on a request handed to the 'upgrade' event.
 * - `'checkContinue'` re-emitted as 'request': Node would answer `Expect: 100-continue` at once,
 *   inviting the body before any decision; the limit hook sends the 100 only to admitted requests.
 */
import { randomBytes } from 'node:crypto';
import { type IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { type NormalizedHost, normalizeHost, normalizePath, requestHostOf } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import type { TrustFunction } from '../config/config.js';
import { isRequestId, REQUEST_ID_HEADER } from './request-id.js';
import type { HeadRefusal, TransportRequest } from './transport-request.js';

/** Most Host values whose reading one gateway remembers (it sees a handful; a flood of others only churns it). */
const READ_HOSTS_MAX = 1_024;

declare module 'node:http' {
  interface IncomingMessage {
    /**
     * the request as the gateway read it before routing: Fastify's `rewriteUrl` runs before its
     * request (and so `request.sluice`) exists, and this is how what it read reaches the admission
     * hook, which moves it into the request's one context
     */
    sluiceTransport?: TransportRequest;
  }
}
type Http1Message = IncomingMessage & { upgrade?: boolean };

/** The transport-neutral request `Http1Requests.rewriteUrl` made of `req` (every routed request has one). */
export function transportOf(req: IncomingMessage): TransportRequest {
  return req.sluiceTransport!;
}

class Http1Request implements TransportRequest {
  constructor(
    private readonly req: IncomingMessage,
    readonly authority: string | undefined,
    readonly refusal: HeadRefusal | undefined,
  ) {}

  get method(): string {
    return this.req.method ?? '';
  }

  get path(): string {
    // Fastify keeps the target as received beside the rewritten one
    return (this.req as IncomingMessage & { originalUrl?: string }).originalUrl ?? this.req.url ?? '';
  }

  get headers(): IncomingMessage['headers'] {
    return this.req.headers;
  }

  headerLines(lowercaseName: string): readonly string[] | undefined {
    return this.req.headersDistinct[lowercaseName];
  }

  get peer() {
    const socket = this.req.socket;
    return { address: socket.remoteAddress, port: socket.remotePort };
  }

  get tls(): boolean {
    return (this.req.socket as TLSSocket).encrypted === true;
  }

  get webSocket(): boolean {
    const req = this.req as Http1Message;
    return req.upgrade === true && req.method === 'GET' && req.headers.upgrade?.toLowerCase() === 'websocket';
  }
}

/** Reads one proxy listener's requests; made once per listener, it remembers the Host values it has read. */
export class Http1Requests {
  readonly #hosts = new Map<string, NormalizedHost>();

  constructor(private readonly maxHeaderCount: number) {}

  /** Fastify `rewriteUrl`: makes the request's transport request, and gives the router its normalised target. */
  readonly rewriteUrl = (req: IncomingMessage): string => {
    const target = normalizePath(req.url ?? '');
    let refusal = this.#refusedHead(req);
    let authority: string | undefined;
    if (refusal === undefined && !target.ok) {
      refusal = { code: 'SLUICE_BAD_PATH', message: target.message, reason: target.code };
    }
    if (refusal === undefined) {
      const host = this.#host(req);
      if (host.ok) authority = host.host === '' ? undefined : host.host;
      else refusal = { code: 'SLUICE_BAD_HOST', message: host.message, reason: host.code };
    }
    req.sluiceTransport = new Http1Request(req, authority, refusal);
    if (!target.ok) return '/';
    return target.query === '' ? target.path : `${target.path}?${target.query}`;
  };

  /** The refusal of a request line or head the gateway never proxies (SPEC §4), or undefined. */
  #refusedHead(req: IncomingMessage): HeadRefusal | undefined {
    if (req.method === 'CONNECT') {
      return {
        code: 'SLUICE_METHOD_NOT_ALLOWED',
        message: 'CONNECT is not proxied: the gateway is a reverse proxy, not a tunnel',
      };
    }
    if (req.httpVersionMajor === 0) {
      return {
        code: 'SLUICE_BAD_REQUEST',
        message: 'the request line has no HTTP version (HTTP/0.9 is not served)',
        reason: 'HTTP_VERSION_MISSING',
      };
    }
    // rawHeaders holds a name and a value per line
    if (req.rawHeaders.length > this.maxHeaderCount * 2) {
      return {
        code: 'SLUICE_TOO_MANY_HEADERS',
        message: `the request has more than ${this.maxHeaderCount} header lines`,
      };
    }
    return undefined;
  }

  #host(req: IncomingMessage) {
    const raw = req.rawHeaders;
    let seen = 0;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!;
      if (name.length === 4 && name.toLowerCase() === 'host' && ++seen > 1) break;
    }
    // Node's own check for a missing Host is off so that this answer, like every other, carries a code
    const http11 = req.httpVersionMajor === 1 && req.httpVersionMinor >= 1;
    return requestHostOf(seen, req.headers.host, http11, this.#readHost);
  }

  readonly #readHost = (value: string | undefined): NormalizedHost => {
    if (value === undefined) return normalizeHost(value);
    let host = this.#hosts.get(value);
    if (host === undefined) {
      host = normalizeHost(value);
      if (this.#hosts.size >= READ_HOSTS_MAX) this.#hosts.clear();
      this.#hosts.set(value, host);
    }
    return host;
  };
}

/** The router's host constraint: an UPSTREAMS entry naming a host is registered under it. */
export const HOST_CONSTRAINT = 'sluiceHost';
type ConstraintStrategy = Parameters<FastifyInstance['addConstraintStrategy']>[0];
type RouteHandler = NonNullable<ReturnType<ReturnType<ConstraintStrategy['storage']>['get']>>;
export const hostConstraintStrategy: ConstraintStrategy = {
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
  deriveConstraint: (req: IncomingMessage) => transportOf(req).authority ?? '',
};

/**
 * Node's server as the gateway needs it: header lines past MAX_HEADER_COUNT, CONNECT and upgrades
 * reach the admission hook, and `Expect: 100-continue` waits for the limit hook.
 */
export function adaptNodeServer(app: FastifyInstance, maxHeaderCount: number): void {
  const server = app.server;
  server.maxHeadersCount = maxHeaderCount + 1;
  server.on('checkContinue', (request, response) => server.emit('request', request, response));
  server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
    routeHandedOver(app, req, socket, head),
  );
}

/**
 * Routes every upgrade request through Fastify. An answer other than a relayed WebSocket (a refusal,
 * a 429, or a plain answer to an upgrade the gateway does not relay, such as `h2c`) ends the
 * connection: no HTTP parser reads this socket any more.
 */
export function routeUpgrades(app: FastifyInstance): void {
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
    routeHandedOver(app, req, socket, head),
  );
}

/** The answer Node is writing on a connection, if any (undeclared in Node's types). */
function pendingAnswer(socket: Socket): ServerResponse | null | undefined {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
}

/**
 * The id of the request whose answer is pending on `socket`, when Node reports an error of that
 * request's body (the admission hook set it on the raw response); undefined when none was read.
 */
export function requestIdOn(socket: Socket): string | undefined {
  const id = pendingAnswer(socket)?.getHeader(REQUEST_ID_HEADER);
  return typeof id === 'string' ? id : undefined;
}

/**
 * Routes a handed-over request once the answers before it on its connection are sent, on a
 * response of its own that closes the connection once sent. If one of those answers closes the
 * connection, the request is dropped unanswered and never proxied, like any request pipelined
 * behind a close.
 */
function routeHandedOver(app: FastifyInstance, req: IncomingMessage, duplex: Duplex, head: Buffer): void {
  const socket = duplex as Socket;
  // bytes the client sent after its head: whoever reads the socket next reads them first
  if (head.length > 0) socket.unshift(head);
  // Node stops handling errors on a handed-over socket; a reset client is seen as its 'close'
  socket.on('error', () => {});
  whenTurnComes(socket, () => {
    const response = new ServerResponse(req);
    response.shouldKeepAlive = false;
    response.assignSocket(socket);
    response.once('finish', () => socket.destroySoon());
    app.routing(req, response);
  });
}

function whenTurnComes(socket: Socket, route: () => void): void {
  if (socket.destroyed || socket.writableEnded) {
    // an answer before this one closed the connection: nobody would read this one's answer
    socket.destroy();
    return;
  }
  const before = pendingAnswer(socket);
  if (before == null) {
    route();
    return;
  }
  // Node's own 'finish' listener (registered first) has moved the connection on when ours runs
  const next = () => {
    before.off('finish', next);
    before.off('close', next);
    whenTurnComes(socket, route);
  };
  before.once('finish', next);
  before.once('close', next);
}

/**
 * Fastify's `genReqId` (request-id.ts says which ids are kept): the incoming X-Request-Id from a
 * trusted peer, sent once; otherwise this process's random prefix and a counter, unique across
 * gateways and restarts without a random number per request.
 */
export function requestIdGenerator(trust: TrustFunction | false): (req: IncomingMessage) => string {
  const prefix = `${randomBytes(5).toString('hex')}-`;
  let counter = 0;
  return (req) => {
    const incoming = req.headers[REQUEST_ID_HEADER];
    if (
      typeof incoming === 'string' &&
      trust !== false &&
      trust(req.socket.remoteAddress ?? '', 0) &&
      isRequestId(incoming) &&
      sentOnce(req)
    ) {
      return incoming;
    }
    return prefix + (++counter).toString(36);
  };
}

/** Node joins repeated X-Request-Id lines into one value: two ids are no id. */
function sentOnce(req: IncomingMessage): boolean {
  const raw = req.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === REQUEST_ID_HEADER.length && raw[i]!.toLowerCase() === REQUEST_ID_HEADER) seen++;
  }
  return seen === 1;
}
