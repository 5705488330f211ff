/**
 * The claims of a verified token as the rules read them (docs/rules.md, "Verified identity"): a
 * limit keyed by a claim (`client: { by: "jwt", claim }`) and the `match.claims` conditions.
 *
 * Claims come from a token's JSON payload, so a claim name is looked up as an own property only: a
 * token or a rule naming `constructor` or `__proto__` finds nothing an object inherits.
 */
import { boundedKey } from '../http/client-key.js';

/** The payload of a token that verified: only ever built by a verifier, never from unverified input. */
export type VerifiedClaims = Readonly<Record<string, unknown>>;

/** A value `match.claims` compares with: a claim equals it, or a list claim contains it. */
export type ClaimValue = string | number | boolean;

/** The default claim a `jwt` client is keyed by. */
export const DEFAULT_CLIENT_CLAIM = 'sub';

/** A top-level claim of a verified token, own properties only. */
export function claimOf(claims: VerifiedClaims, name: string): unknown {
  return Object.hasOwn(claims, name) ? claims[name] : undefined;
}

/**
 * `jwt:<value>` for a string or finite number claim of a verified token; undefined without a verified
 * token or when the claim is absent, empty or another type (the request is then keyed by its IP).
 */
export function jwtClientKey(claims: VerifiedClaims | undefined, claim: string): string | undefined {
  if (claims === undefined) return undefined;
  const value = claimOf(claims, claim);
  if (typeof value === 'string') return value === '' ? undefined : boundedKey('jwt', value);
  if (typeof value === 'number' && Number.isFinite(value)) return boundedKey('jwt', String(value));
  return undefined;
}

/**
 * True when a verified token's claim holds for one `match.claims` entry: the claim equals one of the
 * wanted values (same type, no coercion), or it is a list holding one of them (`roles`).
 */
export function claimMatches(actual: unknown, wanted: ClaimValue | readonly ClaimValue[]): boolean {
  if (actual === undefined || actual === null) return false;
  const values = Array.isArray(wanted) ? (wanted as readonly ClaimValue[]) : [wanted as ClaimValue];
  if (Array.isArray(actual)) return actual.some((item) => values.includes(item as ClaimValue));
  return values.includes(actual as ClaimValue);
}
