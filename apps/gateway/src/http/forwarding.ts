/**
 * What the upstream is told about the client (docs/gateway.md, "What the upstream is told"): the
 * forwarding headers of FORWARDED_HEADERS, written by the gateway on every proxied request and
 * WebSocket handshake, and the client's Host for an UPSTREAMS entry with `;preserveHost`.
 *
 * Whatever the request carried under these names is dropped first: the gateway writes them from
 * what it knows. The address chain is the one TRUST_PROXY believes (Fastify's `request.ips`, the same
 * trust function): the trusted hops of the incoming X-Forwarded-For, then the socket peer; what an
 * untrusted peer wrote is never passed on. `-Proto`, `-Host` and `-Port` come from a trusted peer's
 * own headers when it sent readable ones, else from this connection and its Host.
 *
 * Header hygiene: hop-by-hop headers are dropped both ways (RFC 9110 §7.6.1), a limited request's response carries the gateway's RateLimit headers,
 * never the upstream's, nor the upstream's charge header (it is the gateway's to read: it feeds the
 * request's exchange), and every response the gateway's own X-Request-Id.
 */
import type { IncomingMessage } from 'node:http';
import { isIPv4, isIPv6, type Socket } from 'node:net';
import { type Exchange, normalizeHost } from '@sluice/shared';
import type { FastifyRequest } from 'fastify';
import type { ForwardedHeadersMode, TrustFunction } from '../config/config.js';
import type { RequestContext } from './request-context.js';

/** Request headers the gateway writes itself; the client's values never pass. */
const FORWARDING_HEADERS = [
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-forwarded-port',
] as const;

/** The outgoing request's headers (undici's and ws' shape). */
export type OutgoingHeaders = Record<string, string | string[] | number | undefined>;

export interface ForwardingOptions {
  mode: ForwardedHeadersMode;
  trust: TrustFunction | false;
}

/** Writes the forwarding headers (and, with `preserveHost`, the client's Host) onto `headers`. */
export function setForwardingHeaders(
  request: FastifyRequest,
  headers: OutgoingHeaders,
  options: ForwardingOptions,
  preserveHost: boolean,
): void {
  // deleting only what is there: a delete turns the object into a slow dictionary
  for (const name of FORWARDING_HEADERS) if (headers[name] !== undefined) delete headers[name];
  const raw = request.raw;
  const host = routedHost(request);
  if (preserveHost && host !== undefined) headers.host = host;
  const mode = options.mode;
  if (mode === 'none') return;

  const socket = raw.socket;
  const trust = options.trust;
  const peerTrusted = trust !== false && trust(socket.remoteAddress ?? '', 0);
  const chain = addressChain(request, trust);
  const proto = (peerTrusted && trustedProto(raw)) || (isEncrypted(socket) ? 'https' : 'http');
  const forwardedHost = (peerTrusted && trustedHost(raw)) || host;
  if (mode !== 'forwarded') {
    headers['x-forwarded-for'] = chain.join(', ');
    headers['x-forwarded-proto'] = proto;
    if (forwardedHost !== undefined) headers['x-forwarded-host'] = forwardedHost;
    headers['x-forwarded-port'] =
      (peerTrusted && trustedPort(raw)) || portOf(raw.headers.host) || String(socket.localPort ?? '');
  }
  if (mode !== 'x-forwarded') headers.forwarded = forwardedElements(chain, proto, forwardedHost);
}

/**
 * The addresses the request came through, the client first and the socket peer last: the hops
 * TRUST_PROXY believes (`request.ips` is the peer first, then each trusted hop of X-Forwarded-For,
 * ending at the client), with the client written as the gateway keyed it (port dropped, canonical).
 */
function addressChain(request: FastifyRequest, trust: TrustFunction | false): string[] {
  const peer = plainAddress(request.raw.socket.remoteAddress ?? '');
  if (trust === false) return [peer];
  const hops = request.ips ?? [];
  if (hops.length <= 1) return [peer];
  const chain: string[] = new Array(hops.length);
  for (let i = 0; i < hops.length; i++) chain[i] = hops[hops.length - 1 - i]!;
  chain[0] = request.sluice?.clientAddress ?? chain[0]!;
  chain[hops.length - 1] = peer;
  return chain;
}

/** An IPv4-mapped IPv6 peer (`::ffff:203.0.113.7`, a dual-stack listener) as the IPv4 address it is. */
function plainAddress(address: string): string {
  if (address.startsWith('::ffff:')) {
    const v4 = address.slice(7);
    if (isIPv4(v4)) return v4;
  }
  return address;
}

/**
 * The client's host as the gateway routed on it (normalised once, in the request's context), with the
 * port its Host header wrote; undefined when it names none.
 */
function routedHost(request: FastifyRequest): string | undefined {
  const host = request.sluice?.host;
  if (host === undefined) return undefined;
  const port = portOf(request.raw.headers.host);
  return port === undefined ? host : `${host}:${port}`;
}

/** A Host value, when valid, with the port it names (a trusted proxy's X-Forwarded-Host). */
function validHost(value: string): boolean {
  const normalized = normalizeHost(value);
  return normalized.ok && normalized.host !== '';
}

/** The port a Host value names (`api.example.com:8080`, `[::1]:8443`); undefined when none. */
function portOf(host: string | undefined): string | undefined {
  if (host === undefined) return undefined;
  const colon = host.lastIndexOf(':');
  // `[::1]` has colons but no port: a port follows the last colon, after any `]`
  if (colon === -1 || colon < host.lastIndexOf(']') || colon === host.length - 1) return undefined;
  const port = host.slice(colon + 1);
  return port.length <= 5 && isDigits(port) && Number(port) <= 65535 ? port : undefined;
}

function isDigits(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

function isEncrypted(socket: Socket): boolean {
  return (socket as Socket & { encrypted?: boolean }).encrypted === true;
}

/** A trusted peer's single value of a header (a list means a proxy chain we cannot read: ignored). */
function single(raw: IncomingMessage, name: string): string | undefined {
  const value = raw.headers[name];
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  return text === '' || text.includes(',') ? undefined : text;
}

function trustedProto(raw: IncomingMessage): string | undefined {
  const proto = single(raw, 'x-forwarded-proto')?.toLowerCase();
  return proto === 'http' || proto === 'https' ? proto : undefined;
}

function trustedHost(raw: IncomingMessage): string | undefined {
  const host = single(raw, 'x-forwarded-host');
  return host !== undefined && validHost(host) ? host : undefined;
}

function trustedPort(raw: IncomingMessage): string | undefined {
  const port = single(raw, 'x-forwarded-port');
  return port !== undefined && port.length <= 5 && isDigits(port) && Number(port) <= 65535 ? port : undefined;
}

/**
 * RFC 7239: one `for=` element per address of the chain, the client's first; that first element
 * also carries the client's `host` and `proto` (the same as X-Forwarded-Host and -Proto).
 */
function forwardedElements(chain: readonly string[], proto: string, host: string | undefined): string {
  let value = `for=${node(chain[0]!)}`;
  if (host !== undefined) value += `;host=${quoted(host)}`;
  value += `;proto=${proto}`;
  for (let i = 1; i < chain.length; i++) value += `, for=${node(chain[i]!)}`;
  return value;
}

/** An RFC 7239 node: IPv6 in brackets and quotes, anything else a token or a quoted string. */
function node(address: string): string {
  return isIPv6(address) ? `"[${address}]"` : quoted(address);
}

const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function quoted(value: string): string {
  return TOKEN_RE.test(value) ? value : `"${value.replace(/["\\]/g, '\\$&')}"`;
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
