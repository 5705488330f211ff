/**
 * Request ids (docs/gateway.md, "Request ids"): every request the proxy listener reads has one, from
 * before its first hook, as Fastify's `request.id` (so every log line of the request carries it as
 * `reqId`). It is the incoming `X-Request-Id` when the socket peer is a proxy TRUST_PROXY trusts and
 * the value is one of 1–128 printable ASCII characters; otherwise a new one. Anyone else's id is
 * replaced: a client must not be able to make its requests look like another's in the logs.
 *
 * A new id is this process's random prefix and a counter: unique across gateways and restarts
 * without a random number per request.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { TrustFunction } from '../config/config.js';

export const REQUEST_ID_HEADER = 'x-request-id';

/** 1–128 printable ASCII characters (space to tilde). */
const REQUEST_ID_RE = /^[\x20-\x7e]{1,128}$/;

/** Whether `value` may be kept as a request id. */
export function isRequestId(value: string): boolean {
  return REQUEST_ID_RE.test(value);
}

/** Fastify's `genReqId` for the proxy listener. */
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
