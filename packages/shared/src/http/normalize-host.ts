/**
 * The one host normaliser. The gateway routes on its output and the rule matcher matches on the same
 * output, so two spellings of one host can never reach one upstream under two different rule sets.
 *
 * - ASCII lower case; the port (`:8080`, or an empty `:`) is dropped; ONE trailing dot is dropped
 *   (`api.example.com.` is the same DNS name as `api.example.com`).
 * - A name is labels of letters, digits, `-` and `_` (Docker and Kubernetes service names use `_`),
 *   separated by single dots. Anything else is refused, never repaired: userinfo (`u@host`),
 *   percent-escapes, spaces, empty labels (`a..b`, `.a`, `a..`), non-ASCII (IDNs arrive as punycode).
 * - A name whose last label is numeric is an IPv4 address to every URL parser, which also reads
 *   `127.1`, `0x7f.0.0.1` and `010.0.0.1` (octal to some). Only the canonical dotted quad is accepted.
 * - An IPv6 literal keeps its brackets and is lower-cased; zone ids (`%25eth0`) are refused.
 * - The empty host (an empty `Host` header, or none from an HTTP/1.0 client) is valid and stays `''`:
 *   it names no host, so only what applies to every host applies to it.
 */
import { isIPv4, isIPv6 } from 'node:net';

export type HostErrorCode = 'HOST_USERINFO' | 'HOST_INVALID';

export type NormalizedHost = { ok: true; host: string } | { ok: false; code: HostErrorCode; message: string };

/** Longest host name (RFC 1035: 253 characters without the trailing dot). */
export const MAX_HOST_LENGTH = 253;

const fail = (code: HostErrorCode, message: string) => Object.freeze({ ok: false as const, code, message });
const USERINFO = fail('HOST_USERINFO', 'Host must not carry userinfo ("user@host")');
const INVALID = fail(
  'HOST_INVALID',
  'Host must be a DNS name (letters, digits, "-", "_", single dots), a dotted-quad IPv4 address or a bracketed IPv6 address, with an optional port',
);
const EMPTY: NormalizedHost = Object.freeze({ ok: true, host: '' });

// checked before lower-casing: `toLowerCase` maps some non-ASCII letters (the Kelvin sign) to ASCII ones
const LABEL_RE = /^[A-Za-z0-9_-]+$/;
const NUMERIC_LABEL_RE = /^(?:0x[0-9a-f]*|[0-9]+)$/i;
const PORT_RE = /^\d{0,5}$/;

/** RFC 3986 allows an empty port (`host:`); a number must be a TCP port. */
const validPort = (port: string): boolean => PORT_RE.test(port) && (port === '' || Number(port) <= 65535);

/** `Host` header value (or undefined when absent) → the normalised host, or why it is refused. */
export function normalizeHost(raw: string | undefined): NormalizedHost {
  if (raw === undefined || raw === '') return EMPTY;
  if (raw.indexOf('@') !== -1) return USERINFO;
  let name: string;
  let port: string;
  if (raw.charCodeAt(0) === 0x5b /* [ */) {
    const close = raw.indexOf(']');
    if (close === -1) return INVALID;
    const rest = raw.slice(close + 1);
    if (rest !== '' && rest.charCodeAt(0) !== 0x3a /* : */) return INVALID;
    port = rest.slice(1);
    const literal = raw.slice(1, close).toLowerCase();
    if (!isIPv6(literal) || literal.indexOf('%') !== -1) return INVALID;
    if (!validPort(port)) return INVALID;
    return { ok: true, host: `[${literal}]` };
  }
  const colon = raw.indexOf(':');
  if (colon === -1) {
    name = raw;
    port = '';
  } else {
    name = raw.slice(0, colon);
    port = raw.slice(colon + 1);
  }
  if (!validPort(port)) return INVALID;
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name === '' || name.length > MAX_HOST_LENGTH) return INVALID;
  const labels = name.split('.');
  for (const label of labels) if (!LABEL_RE.test(label)) return INVALID;
  if (NUMERIC_LABEL_RE.test(labels[labels.length - 1]!) && !isIPv4(name)) return INVALID;
  return { ok: true, host: name.toLowerCase() };
}

/** A request's Host as a gateway reads it from its Host field lines: normalised, or why it is refused. */
export type RequestHost =
  | NormalizedHost
  | { ok: false; code: 'HOST_DUPLICATE' | 'HOST_MISSING'; message: string };

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

/**
 * The Host of a request with `lines` Host field lines, the first one's value being `value` (as Node
 * reads it: spaces around it dropped). Two lines are refused: an upstream or a cache in front of us
 * might read the other one. None is refused on HTTP/1.1 (`requiresHost`); HTTP/1.0 may omit it, and
 * then names no host. `read` is `normalizeHost` or a remembering wrapper of it.
 */
export function requestHostOf(
  lines: number,
  value: string | undefined,
  requiresHost: boolean,
  read: (value: string | undefined) => NormalizedHost = normalizeHost,
): RequestHost {
  if (lines > 1) return DUPLICATE_HOST;
  if (lines === 0 && requiresHost) return MISSING_HOST;
  return read(value);
}
