/**
 * WebSockets (docs/gateway.md, "WebSockets"). A handshake (`GET` with `Upgrade: websocket`) arrives
 * on Node's 'upgrade' event; `routeUpgrades` (node-http1.ts) hands it to Fastify's router like any request, so it is
 * normalised (target.ts), admitted (admission.ts) and decided (limit-hook.ts) exactly as a GET: a
 * denied one gets the usual 429 and the upstream is never contacted. An admitted one reaches its
 * UPSTREAMS entry's route, whose handler calls `WebSocketRelays.relay`:
 *
 * 1. the upstream handshake first, with the forwarding headers and the request id; the client is
 *    answered only once the upstream has: its refusal is relayed as it is (status, headers, body),
 *    an unreachable upstream is a 502, no answer within UPSTREAM_TIMEOUT_MS a 504;
 * 2. then the client's 101 (with the gateway's RateLimit headers and X-Request-Id, and the
 *    subprotocol the upstream chose), and every message relayed both ways until either side closes;
 *    the close code is passed on to the other side.
 *
 * A concurrency slot taken by the handshake is held (and renewed) until both sides have closed
 * (request-context.ts). At shutdown `closeAll` closes every relayed connection with 1001.
 *
 * Messages are relayed whole (ws reads each one), at most BODY_LIMIT_BYTES each (larger: the side
 * that sent it is closed with 1009); a side that cannot keep up pauses the other.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import WebSocket, { WebSocketServer } from 'ws';
import { refuse } from './answers.js';
import { errorBody } from './errors.js';
import {
  type ForwardingOptions,
  type OutgoingHeaders,
  setForwardingHeaders,
  stripResponseHeaders,
} from './forwarding.js';
import { REQUEST_ID_HEADER } from './request-id.js';

/** Where an admitted handshake goes: its entry's origin, the forwarded path, and the entry's Host choice. */
export interface RelayTarget {
  origin: string;
  path: string;
  preserveHost: boolean;
}

export interface WebSocketRelaysOptions {
  /** how long the upstream may take to answer the handshake (UPSTREAM_TIMEOUT_MS) */
  upstreamTimeoutMs: number;
  /** largest message relayed (BODY_LIMIT_BYTES) */
  maxMessageBytes: number;
  forwarding: ForwardingOptions;
}

/** A side that has this much unsent waits before the other side is read again, bytes. */
const HIGH_WATER_BYTES = 1024 * 1024;
/** How long the close handshakes of `closeAll` may take before the sockets are cut, ms. */
const CLOSE_WAIT_MS = 1_000;
/** Request headers ws writes itself for the upstream handshake, or that describe the client's hop only. */
const OWN_HANDSHAKE_HEADERS = [
  'sec-websocket-key',
  'sec-websocket-version',
  'sec-websocket-extensions',
  'sec-websocket-protocol',
];
/** Sec-WebSocket-Key: 16 bytes in base64 (RFC 6455 §4.1). */
const KEY_RE = /^[+/0-9A-Za-z]{22}==$/;
/** A subprotocol name: an HTTP token (RFC 6455 §4.1, RFC 9110 §5.6.2). */
const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

interface Relay {
  readonly client: WebSocket;
  readonly upstream: WebSocket;
}

export class WebSocketRelays {
  readonly #options: WebSocketRelaysOptions;
  readonly #open = new Set<Relay>();
  /** upstream handshakes not answered yet */
  readonly #pending = new Set<WebSocket>();
  #closing = false;

  constructor(options: WebSocketRelaysOptions) {
    this.#options = options;
  }

  /** WebSocket connections relayed now. */
  get size(): number {
    return this.#open.size;
  }

  /** Opens the upstream WebSocket, then answers the client's handshake and relays both ways. */
  relay(request: FastifyRequest, reply: FastifyReply, target: RelayTarget): void {
    const raw = request.raw;
    const key = raw.headers['sec-websocket-key'];
    const version = raw.headers['sec-websocket-version'];
    if (key === undefined || !KEY_RE.test(key) || version !== '13') {
      refuse(
        reply,
        'SLUICE_BAD_REQUEST',
        'a WebSocket handshake needs a Sec-WebSocket-Key and Sec-WebSocket-Version: 13 (RFC 6455 §4.1)',
      );
      return;
    }
    const protocols = (raw.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    if (protocols.some((p) => !TOKEN_RE.test(p)) || new Set(protocols).size !== protocols.length) {
      refuse(reply, 'SLUICE_BAD_REQUEST', 'Sec-WebSocket-Protocol must list distinct tokens (RFC 6455 §4.1)');
      return;
    }
    const context = request.sluice;
    const upstream = new WebSocket(upstreamUrl(target, raw.url ?? '/'), protocols, {
      headers: this.#upstreamHeaders(request, target.preserveHost),
      perMessageDeflate: false,
      handshakeTimeout: this.#options.upstreamTimeoutMs,
      maxPayload: this.#options.maxMessageBytes,
      followRedirects: false,
    });
    context?.upstreamStarted();
    this.#pending.add(upstream);
    let upstreamHeaders: IncomingMessage['headers'] = {};
    /** the client has its answer (the upstream's refusal, an error, or its 101) */
    let answered = false;
    const socket = raw.socket;
    // the client left before the upstream answered: nobody to relay to
    const onClientGone = () => upstream.terminate();
    socket.once('close', onClientGone);
    const handshakeOver = () => {
      answered = true;
      this.#pending.delete(upstream);
      socket.off('close', onClientGone);
    };
    upstream.once('upgrade', (response: IncomingMessage) => {
      upstreamHeaders = response.headers;
    });
    upstream.once('unexpected-response', (upstreamRequest, response) => {
      handshakeOver();
      this.#relayRefusal(request, reply, response);
      response.once('close', () => upstreamRequest.destroy());
    });
    const onHandshakeError = (error: Error) => {
      if (answered) return;
      handshakeOver();
      context?.upstreamDone();
      if (context?.clientDone || socket.destroyed) return;
      if (this.#closing) {
        reply.header('connection', 'close');
        refuse(reply, 'SLUICE_SHUTTING_DOWN', 'the gateway is shutting down; retry on another instance');
        return;
      }
      const exchange = context?.exchange;
      if (/timed out/i.test(error.message)) {
        exchange?.failed(504);
        reply.code(504).send(
          errorBody(
            'SLUICE_UPSTREAM_TIMEOUT',
            `the upstream did not answer the WebSocket handshake within ${this.#options.upstreamTimeoutMs} ms`,
            {
              requestId: request.id,
            },
          ),
        );
        return;
      }
      exchange?.failed(502);
      request.log.warn({ err: error }, 'upstream WebSocket handshake failed');
      reply.code(502).send(
        errorBody('SLUICE_UPSTREAM_UNREACHABLE', 'the upstream WebSocket is unreachable', {
          requestId: request.id,
        }),
      );
    };
    // kept after the handshake: ws needs an 'error' listener at all times
    upstream.on('error', onHandshakeError);
    upstream.once('open', () => {
      handshakeOver();
      if (socket.destroyed || this.#closing) {
        upstream.terminate();
        context?.upstreamDone();
        if (!socket.destroyed) {
          reply.header('connection', 'close');
          refuse(reply, 'SLUICE_SHUTTING_DOWN', 'the gateway is shutting down; retry on another instance');
        }
        return;
      }
      // no `responded(101)`: a charge from the response (its bytes, its time) means nothing for a
      // connection, so a WebSocket costs what it was admitted on
      reply.hijack();
      if (!this.#acceptClient(request, reply, upstream, upstreamHeaders)) {
        // ws refused the client's handshake itself (and answered it): the upstream has nobody to talk to
        upstream.terminate();
        context?.upstreamDone();
      }
    });
  }

  /**
   * Closes every relayed WebSocket with `code` (1001: going away) on both sides; resolves once all are
   * closed, cutting those whose close handshake takes longer than CLOSE_WAIT_MS.
   */
  async closeAll(code = 1001, reason = 'the gateway is shutting down'): Promise<void> {
    this.#closing = true;
    // handshakes still waiting for their upstream are answered 503 (their error path)
    for (const upstream of this.#pending) upstream.terminate();
    if (this.#open.size === 0) return;
    const relays = [...this.#open];
    const closed = relays.map(
      ({ client, upstream }) =>
        new Promise<void>((resolve) => {
          let open = 2;
          const done = () => {
            if (--open === 0) resolve();
          };
          for (const side of [client, upstream]) {
            if (side.readyState === WebSocket.CLOSED) done();
            else side.once('close', done);
            side.close(code, reason);
          }
        }),
    );
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        for (const { client, upstream } of relays) {
          client.terminate();
          upstream.terminate();
        }
        resolve();
      }, CLOSE_WAIT_MS);
    });
    await Promise.race([Promise.all(closed), late]);
    clearTimeout(timer);
  }

  /** The client's handshake, request headers for the upstream: its own, less what ws writes itself. */
  #upstreamHeaders(request: FastifyRequest, preserveHost: boolean): OutgoingHeaders {
    const headers: OutgoingHeaders = { ...request.raw.headers };
    for (const name of OWN_HANDSHAKE_HEADERS) delete headers[name];
    delete headers.connection;
    delete headers.upgrade;
    // ws writes the upstream's Host unless one is given
    delete headers.host;
    setForwardingHeaders(request, headers, this.#options.forwarding, preserveHost);
    headers[REQUEST_ID_HEADER] = request.id;
    return headers;
  }

  /** The upstream refused the handshake: its answer goes to the client as it is. */
  #relayRefusal(request: FastifyRequest, reply: FastifyReply, response: IncomingMessage): void {
    const context = request.sluice;
    context?.exchange?.responded(response.statusCode ?? 502);
    context?.upstreamAnswering(response);
    const headers = stripResponseHeaders({ ...response.headers }, request);
    for (const [name, value] of Object.entries(headers)) if (value !== undefined) reply.header(name, value);
    reply.code(response.statusCode ?? 502).send(response);
  }

  /**
   * The upstream is open: the client gets its 101, then messages flow both ways. False when ws
   * refused the client's handshake (a socket already gone, headers it cannot read).
   */
  #acceptClient(
    request: FastifyRequest,
    reply: FastifyReply,
    upstream: WebSocket,
    upstreamHeaders: IncomingMessage['headers'],
  ): boolean {
    const server = new WebSocketServer({
      noServer: true,
      clientTracking: false,
      perMessageDeflate: false,
      maxPayload: this.#options.maxMessageBytes,
      // the subprotocol is the upstream's choice, among those the client offered
      handleProtocols: (offered) => (offered.has(upstream.protocol) ? upstream.protocol : false),
    });
    server.once('headers', (lines: string[]) => {
      const headers = {
        ...stripResponseHeaders(pickEndToEnd(upstreamHeaders), request),
        ...reply.getHeaders(),
      };
      for (const [name, value] of Object.entries(headers)) {
        if (value === undefined) continue;
        for (const one of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${one}`);
      }
    });
    const raw = request.raw;
    // without a verifyClient, ws completes (or refuses) the handshake before handleUpgrade returns
    let linked = false;
    server.handleUpgrade(raw, raw.socket, Buffer.alloc(0), (client) => {
      linked = true;
      this.#link(request, client, upstream);
    });
    return linked;
  }

  /** Relays messages both ways; each side's close closes the other, with its code. */
  #link(request: FastifyRequest, client: WebSocket, upstream: WebSocket): void {
    const relay: Relay = { client, upstream };
    this.#open.add(relay);
    let closedSides = 0;
    const sideClosed = () => {
      if (++closedSides === 2) this.#open.delete(relay);
    };
    forward(client, upstream);
    forward(upstream, client);
    client.on('close', (code, reason) => {
      sideClosed();
      // 1006: the client vanished without a close frame, "going away" to the upstream
      closeWith(upstream, code === 1006 ? 1001 : code, reason);
    });
    upstream.on('close', (code, reason) => {
      sideClosed();
      request.sluice?.upstreamDone();
      // 1006: the upstream vanished without a close frame: "bad gateway" (RFC 6455 §7.4.1, 1014)
      closeWith(client, code === 1006 ? 1014 : code, reason);
    });
    client.on('error', (error) => request.log.debug({ err: error }, 'client WebSocket error'));
    upstream.on('error', (error) => request.log.debug({ err: error }, 'upstream WebSocket error'));
  }
}

/** The ws:// (or wss://) URL of the upstream handshake: its origin, the forwarded path, the client's query. */
function upstreamUrl(target: RelayTarget, requestUrl: string): string {
  const query = requestUrl.indexOf('?');
  const origin = target.origin.replace(/^http/, 'ws');
  return `${origin}${target.path}${query === -1 ? '' : requestUrl.slice(query)}`;
}

/** The upstream's 101 headers worth passing on (cookies, its own headers); not the handshake's own. */
function pickEndToEnd(headers: IncomingMessage['headers']): IncomingMessage['headers'] {
  const picked: IncomingMessage['headers'] = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith('sec-websocket-') || name === 'upgrade' || name === 'connection') continue;
    picked[name] = value;
  }
  return picked;
}

/** Every message of `from` to `to`, as it came (text or binary); `from` waits while `to` is behind. */
function forward(from: WebSocket, to: WebSocket): void {
  let paused = false;
  const drained = () => {
    if (paused && to.bufferedAmount < HIGH_WATER_BYTES / 2) {
      paused = false;
      from.resume();
    }
  };
  from.on('message', (data, isBinary) => {
    if (to.readyState !== WebSocket.OPEN) return;
    to.send(data, { binary: isBinary }, drained);
    if (!paused && to.bufferedAmount > HIGH_WATER_BYTES) {
      paused = true;
      from.pause();
    }
  });
}

/** Closes `side` with the other side's code; the codes no frame may carry (1005, none given) close without one. */
function closeWith(side: WebSocket, code: number, reason: Buffer): void {
  if (side.readyState === WebSocket.CLOSED || side.readyState === WebSocket.CLOSING) return;
  if (code === 1005) side.close();
  else side.close(code, reason);
}
