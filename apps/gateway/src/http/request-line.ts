/**
 * Request lines and heads the gateway never proxies (SPEC §4), answered by the admission hook with
 * the JSON error body like every other refusal:
 * - a request line without an HTTP version (HTTP/0.9 style, `GET /path`): 400. Node's parser takes
 *   it as HTTP/0.9 and would let it through to the upstream as if it were HTTP/1.x;
 * - `CONNECT host:port`: 405, the gateway is not a forward proxy. Node hands CONNECT to 'connect'
 *   listeners only and destroys the socket when there is none (the client got no answer at all), so
 *   `routeConnects` routes it like any request (handed-over.ts);
 * - more header lines than MAX_HEADER_COUNT: 431. Node keeps at most `server.maxHeadersCount` lines
 *   and drops the rest without a word (a condition or exemption header among them would be lost), so
 *   the server is told to keep one more than the limit: a request it cut is always one refused here.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { GatewayErrorCode } from './errors.js';
import { routeHandedOver } from './handed-over.js';

/** Why a request line or head is refused, as the admission hook answers it. */
export interface RequestLineRefusal {
  code: GatewayErrorCode;
  message: string;
  reason?: string;
  /** the `Allow` header of a 405 */
  allow?: string;
}

/** Keeps one header line more than `maxHeaderCount`, so that `refusedRequestLine` sees every cut. */
export function limitHeaderCount(app: FastifyInstance, maxHeaderCount: number): void {
  app.server.maxHeadersCount = maxHeaderCount + 1;
}

/** Node emits CONNECT on 'connect' only: route it like any request, so it is answered (405). */
export function routeConnects(app: FastifyInstance): void {
  app.server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
    routeHandedOver(app, req, socket, head),
  );
}

/** The refusal of a request line or head the gateway never proxies, or undefined. */
export function refusedRequestLine(
  raw: IncomingMessage,
  maxHeaderCount: number,
  allowedMethods: string,
): RequestLineRefusal | undefined {
  if (raw.method === 'CONNECT') {
    return {
      code: 'SLUICE_METHOD_NOT_ALLOWED',
      message: 'CONNECT is not proxied: the gateway is a reverse proxy, not a tunnel',
      allow: allowedMethods,
    };
  }
  if (raw.httpVersionMajor === 0) {
    return {
      code: 'SLUICE_BAD_REQUEST',
      message: 'the request line has no HTTP version (HTTP/0.9 is not served)',
      reason: 'HTTP_VERSION_MISSING',
    };
  }
  // rawHeaders holds a name and a value per line
  if (raw.rawHeaders.length > maxHeaderCount * 2) {
    return {
      code: 'SLUICE_TOO_MANY_HEADERS',
      message: `the request has more than ${maxHeaderCount} header lines`,
    };
  }
  return undefined;
}
