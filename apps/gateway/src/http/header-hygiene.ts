/**
 * What crosses the proxy and what does not (docs/gateway.md): hop-by-hop headers are dropped both
 * ways (RFC 9110 §7.6.1), a limited request's response carries the gateway's RateLimit headers,
 * never the upstream's, nor the upstream's charge header (it is the gateway's to read: it feeds the
 * request's exchange), and every response the gateway's own X-Request-Id.
 */
import type { FastifyHttpProxyOptions } from '@fastify/http-proxy';

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

export type ReplyHooks = NonNullable<FastifyHttpProxyOptions['replyOptions']>;

/**
 * Deletes the names that are there. A `delete` is a call into V8's runtime even for a name that is
 * absent, and most of these never are present: a read first is the cheap way (ten names each way
 * on every request).
 */
function dropPresent(headers: Record<string, unknown>, names: readonly string[]): void {
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    if (headers[name] !== undefined) delete headers[name];
  }
}

export const stripRequestHeaders: NonNullable<ReplyHooks['rewriteRequestHeaders']> = (request, headers) => {
  // reply-from already dropped `connection` and the names it lists (from a copy of the headers)
  const listed = request.headers.connection;
  if (listed !== undefined) for (const name of connectionTokens(listed)) delete headers[name];
  dropPresent(headers, HOP_BY_HOP_REQUEST);
  // A body the gateway does not forward (GET/HEAD, or none parsed) must not be announced upstream.
  if (request.body == null && headers['content-length'] !== undefined) delete headers['content-length'];
  return headers;
};

export const stripResponseHeaders: NonNullable<ReplyHooks['rewriteHeaders']> = (headers, request) => {
  const listed = headers.connection;
  if (listed !== undefined) for (const name of connectionTokens(listed)) delete headers[name];
  dropPresent(headers, HOP_BY_HOP_RESPONSE);
  // the client gets the request's id as the gateway set it (the upstream was sent the same one)
  if (headers['x-request-id'] !== undefined) delete headers['x-request-id'];
  const context = request?.sluice;
  if (context?.limited) {
    // a shadow rule sends none of its own, so the upstream's pass as if no rule applied
    if (!context.shadow) {
      delete headers.ratelimit;
      delete headers['ratelimit-policy'];
    }
    // the upstream's price of the request is for the gateway only (docs/lifecycle.md)
    const exchange = context.exchange;
    const chargeHeader = exchange?.rule.charge?.header;
    if (chargeHeader !== undefined) {
      exchange!.chargeHeader = headers[chargeHeader];
      delete headers[chargeHeader];
    }
  }
  return headers;
};
