/**
 * Verifies the bearer token of a request with `jose` (docs/configuration.md, "JWT_*"): the gateway's
 * identity hook and the rules API's explain both use it, so explain verifies a token as a gateway would.
 *
 * A token that verifies is cached until its `exp` (at most MAX_CACHE_MS, at most MAX_CACHED tokens,
 * least recently used out first), so a client sending the same token pays one map lookup per request,
 * not one signature check. The cache is emptied when the JWKS changes: a key that left the set stops
 * verifying at once. Tokens that fail are not cached (a client rotating forged tokens would only fill
 * the cache); each costs one signature check, and such a request is keyed by its IP.
 */
import { errors, type JWTPayload, jwtVerify } from 'jose';
import { LRUCache } from 'lru-cache';
import type { VerifiedClaims } from './claims.js';
import { JwksKeys, JwksUnavailableError } from './jwks-keys.js';

/** What verification is set up with (the JWT_* variables). */
export interface JwtConfig {
  /** JWT_JWKS_URL: keys fetched from there */
  jwksUrl?: string | undefined;
  /** JWT_SECRET: an HS256 secret, ≥ 32 bytes */
  secret?: string | undefined;
  /** JWT_ISSUER: when set, required in the token */
  issuer?: string | undefined;
  /** JWT_AUDIENCE: when set, required in the token */
  audience?: string | undefined;
  /** JWT_ALGORITHMS: the allow-list (`none` is never in it) */
  algorithms: readonly string[];
  /** JWT_CLOCK_TOLERANCE_S */
  clockToleranceS: number;
}

/** The algorithms allowed when JWT_ALGORITHMS is not set. */
export const DEFAULT_JWKS_ALGORITHMS = ['RS256', 'ES256', 'EdDSA'] as const;
export const DEFAULT_SECRET_ALGORITHMS = ['HS256'] as const;
/** Algorithms JWT_ALGORITHMS may name: `jose`'s signature algorithms, never `none`. */
export const JWT_ALGORITHMS = [
  'HS256',
  'HS384',
  'HS512',
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;
/** JWT_SECRET must be at least this many bytes (HS256's key size). */
export const MIN_JWT_SECRET_BYTES = 32;
/** Most tokens kept verified. */
export const MAX_CACHED = 10_000;
/** Longest a verified token is kept, ms (a token without `exp` too). */
export const MAX_CACHE_MS = 10 * 60_000;
/** A longer token is verified every time, never cached (it would make the cache large). */
const MAX_CACHED_TOKEN_CHARS = 4_096;

/** Why a token did not verify: the words explain shows and the label of the gateway's metric. */
export type VerifyFailure =
  | 'malformed'
  | 'expired'
  | 'not_yet_valid'
  | 'wrong_issuer'
  | 'wrong_audience'
  | 'claim_invalid'
  | 'algorithm_not_allowed'
  | 'bad_signature'
  | 'unknown_key'
  | 'jwks_unavailable';

export type VerifyOutcome =
  | { readonly ok: true; readonly claims: VerifiedClaims }
  | { readonly ok: false; readonly reason: VerifyFailure; readonly message: string };

export interface VerifierOptions {
  /** monotonic clock, ms (default `performance.now`) */
  now?: () => number;
  /** at most one JWKS fetch per this many ms (default 30 s, SPEC) */
  jwksCooldownMs?: number;
  /** a JWKS older than this is fetched again in the background, ms (default 10 min) */
  jwksMaxAgeMs?: number;
  /** a JWKS fetch that takes longer fails, ms (default 2 s) */
  jwksTimeoutMs?: number;
  /** a JWKS fetch failed (log it, count it) */
  onJwksError?: (error: Error) => void;
  /** a JWKS fetch succeeded */
  onJwksLoaded?: () => void;
}

/** The token of `Authorization: Bearer <token>` (scheme case-insensitive), else undefined. */
export function bearerToken(authorization: string | undefined): string | undefined {
  if (authorization === undefined || authorization.length < 8) return undefined;
  // "Bearer " in any case, then the token (no inner spaces)
  if ((authorization.charCodeAt(6) | 0) !== 32 || authorization.slice(0, 6).toLowerCase() !== 'bearer') {
    return undefined;
  }
  const token = authorization.slice(7).trim();
  return token === '' || token.includes(' ') ? undefined : token;
}

export class TokenVerifier {
  readonly #config: JwtConfig;
  readonly #key: Uint8Array | JwksKeys['key'];
  readonly #jwks: JwksKeys | undefined;
  readonly #now: () => number;
  readonly #cache = new LRUCache<string, VerifiedClaims>({ max: MAX_CACHED });

  constructor(config: JwtConfig, options: VerifierOptions = {}) {
    if ((config.jwksUrl === undefined) === (config.secret === undefined)) {
      throw new TypeError('a verifier needs either a JWKS URL or a secret');
    }
    this.#config = config;
    this.#now = options.now ?? (() => performance.now());
    if (config.jwksUrl !== undefined) {
      this.#jwks = new JwksKeys(config.jwksUrl, {
        cooldownMs: options.jwksCooldownMs ?? 30_000,
        maxAgeMs: options.jwksMaxAgeMs ?? MAX_CACHE_MS,
        timeoutMs: options.jwksTimeoutMs ?? 2_000,
        now: this.#now,
        onChange: () => this.#cache.clear(),
        onError: options.onJwksError ?? (() => {}),
        onLoaded: options.onJwksLoaded ?? (() => {}),
      });
      this.#key = this.#jwks.key;
    } else {
      this.#key = new TextEncoder().encode(config.secret);
    }
  }

  /** Where keys come from, for logs: `jwks` or `secret`. */
  get source(): 'jwks' | 'secret' {
    return this.#jwks === undefined ? 'secret' : 'jwks';
  }

  /** Fetches the JWKS (a no-op with a secret); never rejects: a failure is reported to `onJwksError`. */
  start(): Promise<void> {
    return this.#jwks?.refresh() ?? Promise.resolve();
  }

  /**
   * The claims of a token verified before and still valid: one map lookup, no signature check. A
   * stale JWKS is fetched again in the background even when every token is cached, so a key that
   * left the set stops verifying (the fetch empties the cache when the set changed).
   */
  cached(token: string): VerifiedClaims | undefined {
    this.#jwks?.refreshIfStale();
    return this.#cache.get(token);
  }

  /** Verifies a token (or finds it cached). Never rejects. */
  async verify(token: string): Promise<VerifyOutcome> {
    const cached = this.#cache.get(token);
    if (cached !== undefined) return { ok: true, claims: cached };
    const config = this.#config;
    try {
      const { payload } = await jwtVerify(token, this.#key as Uint8Array, {
        algorithms: [...config.algorithms],
        clockTolerance: config.clockToleranceS,
        ...(config.issuer !== undefined ? { issuer: config.issuer } : {}),
        ...(config.audience !== undefined ? { audience: config.audience } : {}),
      });
      const claims = Object.freeze(payload) as VerifiedClaims;
      this.#remember(token, payload, claims);
      return { ok: true, claims };
    } catch (error) {
      return failure(error);
    }
  }

  #remember(token: string, payload: JWTPayload, claims: VerifiedClaims): void {
    if (token.length > MAX_CACHED_TOKEN_CHARS) return;
    let ttl = MAX_CACHE_MS;
    if (typeof payload.exp === 'number') ttl = Math.min(ttl, payload.exp * 1000 - Date.now());
    if (ttl >= 1) this.#cache.set(token, claims, { ttl: Math.floor(ttl) });
  }
}

/** The reason for `jose`'s error (anything else is a malformed token). */
function failure(error: unknown): VerifyOutcome {
  const message = error instanceof Error ? error.message : String(error);
  const reason = (r: VerifyFailure): VerifyOutcome => ({ ok: false, reason: r, message });
  if (error instanceof JwksUnavailableError) return reason('jwks_unavailable');
  if (error instanceof errors.JWTExpired) return reason('expired');
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'nbf' || error.claim === 'iat') return reason('not_yet_valid');
    if (error.claim === 'iss') return reason('wrong_issuer');
    if (error.claim === 'aud') return reason('wrong_audience');
    return reason('claim_invalid');
  }
  if (error instanceof errors.JOSEAlgNotAllowed || error instanceof errors.JOSENotSupported) {
    return reason('algorithm_not_allowed');
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) return reason('bad_signature');
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) {
    return reason('unknown_key');
  }
  return reason('malformed');
}
