/**
 * Who a request is from, as a client key: the one spelling the gateway keys its counters by and that
 * explain and the console show (docs/rules.md, "Clients").
 *
 * Keys carry a kind prefix so the kinds can never collide: `ip:203.0.113.7`, `ip:2001:db8:1:2::/64`
 * (IPv6 by its /64), `header:<value>` (`header:~<HMAC>` for a credential, identity/secret-keys.ts),
 * `jwt:<claim value>` (identity/claims.ts), `global`. A header limit's request without the header is keyed
 * `ip:…`, exactly like an ip limit. A value longer than 256 bytes is replaced by its SHA-256 in hex.
 */
import { createHash } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';

/** Longest client key kept verbatim, in bytes (docs/gateway.md). */
export const MAX_CLIENT_KEY_BYTES = 256;
export const GLOBAL_CLIENT_KEY = 'global';

/** `<kind>:<value>`, with the value replaced by its SHA-256 (hex) when longer than MAX_CLIENT_KEY_BYTES. */
export function boundedKey(kind: 'ip' | 'header' | 'jwt', value: string): string {
  // A UTF-16 code unit is at most 3 UTF-8 bytes, so short strings need no byte count.
  if (value.length * 3 <= MAX_CLIENT_KEY_BYTES || Buffer.byteLength(value) <= MAX_CLIENT_KEY_BYTES) {
    return `${kind}:${value}`;
  }
  return `${kind}:${createHash('sha256').update(value).digest('hex')}`;
}

/**
 * The client address a trusted proxy forwarded, as one canonical IP address: a port is dropped
 * (`203.0.113.7:1234`, `[2001:db8::1]:443`: some proxies write it), anything else must be an IP
 * address as Node reads it. Undefined when it is not one: `005.005.005.005` (octal to some parsers,
 * decimal to others), `203.0.113` or `unknown` name no client, and the gateway answers 400
 * (SLUICE_BAD_FORWARDED_FOR) rather than guess.
 */
export function forwardedClientIp(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (isIPv4(value) || isIPv6(value)) return value;
  if (value.charCodeAt(0) === 91 /* [ */) {
    const close = value.indexOf(']');
    const rest = value.slice(close + 1);
    if (close === -1 || (rest !== '' && !/^:\d{1,5}$/.test(rest))) return undefined;
    const inner = value.slice(1, close);
    return isIPv6(inner) ? inner : undefined;
  }
  const colon = value.lastIndexOf(':');
  if (colon === -1 || !/^\d{1,5}$/.test(value.slice(colon + 1))) return undefined;
  const address = value.slice(0, colon);
  return isIPv4(address) ? address : undefined;
}

/** `ip:<address>`: IPv4 as is, IPv4-mapped IPv6 as IPv4, other IPv6 as its /64 prefix; a port is dropped. */
export function ipClientKey(address: string | undefined): string {
  if (address === undefined || address === '') return 'ip:unknown';
  if (address.indexOf(':') === -1) return boundedKey('ip', address);
  const groups = parseIPv6(address);
  if (groups === undefined) {
    // `a.b.c.d:port` or `[v6]:port` from a forwarding header: the same client as without the port
    const withoutPort = forwardedClientIp(address);
    return withoutPort !== undefined && withoutPort !== address
      ? ipClientKey(withoutPort)
      : boundedKey('ip', address);
  }
  if (
    groups[0] === 0 &&
    groups[1] === 0 &&
    groups[2] === 0 &&
    groups[3] === 0 &&
    groups[4] === 0 &&
    groups[5] === 0xffff
  ) {
    const hi = groups[6]!;
    const lo = groups[7]!;
    return `ip:${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
  }
  return `ip:${groups[0]!.toString(16)}:${groups[1]!.toString(16)}:${groups[2]!.toString(16)}:${groups[3]!.toString(16)}::/64`;
}

/**
 * `header:<value>` for a header value as Node presents it in `req.headers` (a repeated header's values
 * joined by ", "; an array only for `set-cookie`, whose first value counts), else undefined.
 */
export function headerClientKey(value: string | readonly string[] | undefined): string | undefined {
  const first = typeof value === 'string' ? value : value?.[0];
  if (first === undefined || first === '') return undefined;
  return boundedKey('header', first);
}

/**
 * The eight 16-bit groups of an IPv6 address (zone id dropped; embedded IPv4 allowed), or undefined
 * when it is not one.
 */
export function parseIPv6(input: string): number[] | undefined {
  let text = input;
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  let tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.indexOf('.', lastColon) !== -1) {
    const v4 = text.slice(lastColon + 1).split('.');
    if (v4.length !== 4) return undefined;
    const bytes = v4.map((b) => (/^\d{1,3}$/.test(b) ? Number(b) : 256));
    if (bytes.some((b) => b > 255)) return undefined;
    tail = [(bytes[0]! << 8) | bytes[1]!, (bytes[2]! << 8) | bytes[3]!];
    // `::ffff:1.2.3.4` → `::ffff`, `::1.2.3.4` → `::`, `1:2:3:4:5:6:1.2.3.4` → `1:2:3:4:5:6`
    text = text.slice(0, lastColon + 1);
    if (!text.endsWith('::')) text = text.slice(0, -1);
  }
  const parseGroups = (part: string): number[] | undefined => {
    if (part === '') return [];
    const out: number[] = [];
    for (const g of part.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(Number.parseInt(g, 16));
    }
    return out;
  };
  const want = 8 - tail.length;
  const double = text.indexOf('::');
  let groups: number[];
  if (double === -1) {
    const all = parseGroups(text);
    if (all === undefined || all.length !== want) return undefined;
    groups = all;
  } else {
    if (text.indexOf('::', double + 1) !== -1) return undefined;
    const head = parseGroups(text.slice(0, double));
    const rest = parseGroups(text.slice(double + 2));
    if (head === undefined || rest === undefined || head.length + rest.length >= want) return undefined;
    groups = [...head, ...new Array<number>(want - head.length - rest.length).fill(0), ...rest];
  }
  return [...groups, ...tail];
}
