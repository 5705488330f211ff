/**
 * The facts of one request the decision core decides on: what any front door (the proxy hook, a
 * WebSocket handshake, explain) can tell about a request without the core knowing how it arrived.
 * The gateway's per-request context implements it directly (no object is built per request for it).
 */
import type { VerifiedClaims } from '../identity/claims.js';
import type { MatchRequest } from '../rules/match.js';

export interface RequestFacts extends MatchRequest {
  /** uppercase HTTP method */
  readonly method: string;
  /** the normalised host (lower case, no port, no trailing dot); undefined when the request names none */
  readonly host: string | undefined;
  /** the normalised path in canonical form (`normalizePath(…).path`) */
  readonly path: string;
  /** every value of a header (lowercase name), one per field line as received; undefined when absent */
  header(lowercaseName: string): readonly string[] | undefined;
  /**
   * A header's value as a client key reads it: the field lines joined the way Node joins them in
   * `req.headers` (`joinedHeaderValue`); undefined when absent.
   */
  joinedHeader(lowercaseName: string): string | undefined;
  /** the client IP as TRUST_PROXY decides it (the socket peer unless proxies are trusted) */
  clientIp(): string | undefined;
  /**
   * the claims of the request's bearer token once a verifier accepted it; undefined without a token,
   * with one that failed, or where no verifier ran (docs/rules.md, "Verified identity")
   */
  claims?(): VerifiedClaims | undefined;
}

/**
 * Headers Node keeps only the first line of when a request repeats them (its `matchKnownFields`):
 * a second `Authorization` or `User-Agent` is dropped from `req.headers`, not joined.
 */
const FIRST_LINE_ONLY: ReadonlySet<string> = new Set([
  'age',
  'authorization',
  'content-length',
  'content-type',
  'etag',
  'expires',
  'from',
  'host',
  'if-modified-since',
  'if-unmodified-since',
  'last-modified',
  'location',
  'max-forwards',
  'proxy-authorization',
  'referer',
  'retry-after',
  'server',
  'user-agent',
]);

/**
 * The value Node gives a header in `req.headers` for these field lines: the first line only for the
 * headers it does not join, `; `-joined for `cookie`, `, `-joined for every other header. Explain
 * reads its JSON headers with this, so a client key it shows is the one a gateway keys by
 * (facts.test.ts compares it with a real Node server).
 */
export function joinedHeaderValue(
  lowercaseName: string,
  values: readonly string[] | undefined,
): string | undefined {
  if (values === undefined || values.length === 0) return undefined;
  if (values.length === 1 || FIRST_LINE_ONLY.has(lowercaseName)) return values[0];
  return values.join(lowercaseName === 'cookie' ? '; ' : ', ');
}
