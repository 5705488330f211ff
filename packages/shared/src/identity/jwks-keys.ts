/**
 * The signing keys a JWKS URL publishes, for `jose`'s `jwtVerify` (docs/configuration.md, JWT_JWKS_URL).
 *
 * Why not `jose`'s `createRemoteJWKSet`: while its set has never loaded it fetches again for every
 * token, so a JWKS outage would hold every authenticated request for the fetch timeout. Here every
 * fetch — at start, on an unknown `kid`, and in the background once the set is older than its
 * max age — is at most one per cool-down (30 s), shared by the requests that wait for it. Between
 * fetches a token whose key is unknown fails at once: the request counts as unauthenticated, it is
 * never held or refused. Selecting a key from the set (kid, alg, use) is `jose`'s `createLocalJWKSet`.
 */
import { createLocalJWKSet, errors, type JSONWebKeySet, type JWSHeaderParameters } from 'jose';

/** The JWKS could not be fetched (and no earlier copy is at hand): tokens count as unauthenticated. */
export class JwksUnavailableError extends Error {
  readonly code = 'SLUICE_JWKS_UNAVAILABLE';
}

export interface JwksKeysOptions {
  /** at most one fetch per this many ms (SPEC: 30 s) */
  cooldownMs: number;
  /** a fetch that takes longer fails, ms */
  timeoutMs: number;
  /** a set older than this is fetched again in the background, ms */
  maxAgeMs: number;
  /** monotonic clock, ms */
  now: () => number;
  /** the set of keys changed (tokens verified with the old set must be verified again) */
  onChange: () => void;
  /** a fetch failed: the caller logs it and counts it */
  onError: (error: Error) => void;
  /** a fetch succeeded */
  onLoaded: () => void;
}

type LocalSet = ReturnType<typeof createLocalJWKSet>;

export class JwksKeys {
  #local: LocalSet | undefined;
  /** the fetched document, to tell a changed set from the same one fetched again */
  #document = '';
  #lastAttemptMs = Number.NEGATIVE_INFINITY;
  #loadedAtMs = Number.NEGATIVE_INFINITY;
  #pending: Promise<void> | undefined;

  constructor(
    readonly url: string,
    readonly options: JwksKeysOptions,
  ) {}

  /** True once a set has been fetched. */
  get loaded(): boolean {
    return this.#local !== undefined;
  }

  /** Fetches the set now unless a fetch is running (which it then waits for); never rejects. */
  refresh(): Promise<void> {
    this.#pending ??= this.#fetch().finally(() => {
      this.#pending = undefined;
    });
    return this.#pending;
  }

  /** Starts a background fetch when the set is older than its max age (and the cool-down allows). */
  refreshIfStale(): void {
    const now = this.options.now();
    if (
      this.#pending === undefined &&
      now - this.#loadedAtMs >= this.options.maxAgeMs &&
      now - this.#lastAttemptMs >= this.options.cooldownMs
    ) {
      void this.refresh();
    }
  }

  /** The key for a token's protected header: what `jwtVerify` calls. */
  key = async (header: JWSHeaderParameters, token: Parameters<LocalSet>[1]) => {
    const now = this.options.now();
    const mayFetch = this.#pending !== undefined || now - this.#lastAttemptMs >= this.options.cooldownMs;
    if (this.#local === undefined) {
      if (!mayFetch) throw new JwksUnavailableError(`the JWKS at ${this.url} could not be fetched`);
      await this.refresh();
      return this.#loadedSet()(header, token);
    }
    // stale: fetched again in the background; this token is checked against the set at hand
    this.refreshIfStale();
    try {
      return await this.#local(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey) || !mayFetch) throw error;
    }
    // an unknown kid (a rotation): one fetch, then one more look
    await this.refresh();
    return this.#loadedSet()(header, token);
  };

  #loadedSet(): LocalSet {
    if (this.#local === undefined) {
      throw new JwksUnavailableError(`the JWKS at ${this.url} could not be fetched`);
    }
    return this.#local;
  }

  async #fetch(): Promise<void> {
    this.#lastAttemptMs = this.options.now();
    try {
      const response = await fetch(this.url, {
        headers: { accept: 'application/jwk-set+json, application/json' },
        signal: AbortSignal.timeout(this.options.timeoutMs),
        redirect: 'error',
      });
      if (!response.ok) throw new Error(`GET ${this.url} answered ${response.status}`);
      const text = await response.text();
      const document = JSON.parse(text) as JSONWebKeySet;
      if (document === null || typeof document !== 'object' || !Array.isArray(document.keys)) {
        throw new Error(`${this.url} is not a JWK set (no "keys" array)`);
      }
      const local = createLocalJWKSet(document);
      this.#loadedAtMs = this.options.now();
      const changed = this.#local !== undefined && text !== this.#document;
      this.#local = local;
      this.#document = text;
      if (changed) this.options.onChange();
      this.options.onLoaded();
    } catch (error) {
      this.options.onError(error instanceof Error ? error : new Error(String(error)));
    }
  }
}
