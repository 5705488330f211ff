/**
 * What crosses the proxy and what does not (docs/gateway.md): hop-by-hop headers are dropped both
 * ways (RFC 9110 §7.6.1), a limited request's response carries the gateway's RateLimit headers,
 * never the upstream's, nor the upstream's charge header (it is the gateway's to read: it feeds the
 * request's exchange), and every response the gateway's own X-Request-Id.
 */
import type { Exchange } from '@sluice/shared';
import type { FastifyRequest } from 'fastify';
import type { OutgoingHeaders } from './forwarding.js';
import type { RequestContext } from './request-context.js';

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
const HOP_BY_HOP_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);

function connectionTokens(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const text = Array.isArray(value) ? value.join(',') : value;
  return text
    .toLowerCase()
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

/**
 * Deletes the names that are there. A `delete` is a call into V8's runtime even for a name that is
 * absent, and most of these never are present: a read first is the cheap way (ten names on every
 * request).
 */
function dropPresent(headers: Record<string, unknown>, names: readonly string[]): void {
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    if (headers[name] !== undefined) delete headers[name];
  }
}

/** The client's request headers (a copy) as the upstream may see them: this hop's own names dropped. */
export function stripRequestHeaders(request: FastifyRequest, headers: OutgoingHeaders): OutgoingHeaders {
  const listed = request.headers.connection;
  if (listed !== undefined) for (const name of connectionTokens(listed)) delete headers[name];
  dropPresent(headers, HOP_BY_HOP_REQUEST);
  // A body the gateway does not forward (GET/HEAD, or none parsed) must not be announced upstream.
  if (request.body == null && headers['content-length'] !== undefined) delete headers['content-length'];
  return headers;
}

/** What a response's rules depend on: the request's rule, and the exchange its charge header feeds. */
interface ResponseRules {
  /** the gateway sends its own RateLimit headers: the upstream's never pass */
  ownLimits: boolean;
  /** the exchange that reads the upstream's price, and the header it is in */
  exchange: Exchange | undefined;
  chargeHeader: string | undefined;
}

function responseRules(context: RequestContext | null): ResponseRules {
  // a shadow rule sends none of its own, so the upstream's pass as if no rule applied
  if (context === null || !context.limited)
    return { ownLimits: false, exchange: undefined, chargeHeader: undefined };
  // the upstream's price of the request is for the gateway only (docs/lifecycle.md)
  const exchange = context.exchange;
  return { ownLimits: !context.shadow, exchange, chargeHeader: exchange?.rule.charge?.header };
}

/**
 * Whether a response header (lower case) stays on the gateway's side: the upstream's hop, the request
 * id (the client gets the gateway's, the one the upstream was sent), the upstream's RateLimit headers
 * when the gateway sends its own. The names the upstream's Connection lists and its charge header are
 * the callers' to handle.
 */
function keptFromClient(name: string, ownLimits: boolean): boolean {
  return (
    HOP_BY_HOP_RESPONSE.has(name) ||
    name === 'x-request-id' ||
    (ownLimits && (name === 'ratelimit' || name === 'ratelimit-policy'))
  );
}

/** The upstream's response headers (a parsed copy: a refused WebSocket handshake's) as the client may see them. */
export function stripResponseHeaders(
  headers: Record<string, string | string[] | undefined>,
  request: FastifyRequest,
): Record<string, string | string[] | undefined> {
  const { ownLimits, exchange, chargeHeader } = responseRules(request.sluice);
  const listed = connectionTokens(headers.connection);
  for (const name of Object.keys(headers)) {
    if (name === chargeHeader) {
      exchange!.chargeHeader = headers[name];
      delete headers[name];
    } else if (keptFromClient(name, ownLimits) || listed.includes(name)) delete headers[name];
  }
  return headers;
}

/**
 * The upstream's response header lines (undici's raw name/value pairs) as the client may see them,
 * flat (`[name, value, …]`, names in lower case, repeated lines kept): `stripResponseHeaders`' rules,
 * read in one pass over the bytes undici parsed, without a header object. Bytes are read as latin1,
 * which Node writes back unchanged.
 */
export function responseLines(raw: readonly Buffer[], context: RequestContext | null): string[] {
  const { ownLimits, exchange, chargeHeader } = responseRules(context);
  const lines: string[] = [];
  let listed: string[] | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString('latin1').toLowerCase();
    const value = raw[i + 1]!.toString('latin1');
    if (name === 'connection') {
      listed = listed === undefined ? connectionTokens(value) : listed.concat(connectionTokens(value));
      continue;
    }
    if (keptFromClient(name, ownLimits)) continue;
    if (name === chargeHeader) {
      const seen = exchange!.chargeHeader;
      exchange!.chargeHeader = seen === undefined ? value : ([] as string[]).concat(seen, value);
      continue;
    }
    lines.push(name, value);
  }
  if (listed === undefined) return lines;
  // most upstreams list only `keep-alive`, dropped already
  const more = listed.filter((name) => !HOP_BY_HOP_RESPONSE.has(name));
  if (more.length === 0) return lines;
  const kept: string[] = [];
  for (let i = 0; i < lines.length; i += 2) {
    if (!more.includes(lines[i]!)) kept.push(lines[i]!, lines[i + 1]!);
  }
  return kept;
}

/** Header lines with the characters Node refuses in a value taken out (an upstream's broken line still passes). */
export function sanitizedLines(lines: readonly string[]): string[] {
  const clean: string[] = [];
  for (let i = 0; i < lines.length; i += 2) {
    clean.push(lines[i]!, lines[i + 1]!.replace(/[^\t\x20-\x7E\x80-\xFF]/g, ''));
  }
  return clean;
}
