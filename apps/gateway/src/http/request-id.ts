/**
 * Request ids (docs/gateway.md, "Request ids"): every request the proxy listener reads has one, from
 * before its first hook, as Fastify's `request.id` (so every log line of the request carries it as
 * `reqId`). It is the incoming `X-Request-Id` when the socket peer is a proxy TRUST_PROXY trusts and
 * the value is one of 1–128 printable ASCII characters; otherwise a new one (node-http1.ts makes
 * it). Anyone else's id is replaced: a client must not be able to make its requests look like
 * another's in the logs.
 */

export const REQUEST_ID_HEADER = 'x-request-id';

/** 1–128 printable ASCII characters (space to tilde). */
const REQUEST_ID_RE = /^[\x20-\x7e]{1,128}$/;

/** Whether `value` may be kept as a request id. */
export function isRequestId(value: string): boolean {
  return REQUEST_ID_RE.test(value);
}
