/**
 * Secret client keys (docs/rules.md, "Secret client keys"): a header that carries a credential is
 * never stored or shown in clear. Its client key is `header:~<first 24 hex digits of
 * HMAC-SHA256(CLIENT_KEY_SECRET, value)>`, the same on every gateway and in the rules API that share
 * CLIENT_KEY_SECRET, so counters, /usage, /offenders and explain all name the same bucket.
 *
 * Without a secret the digest is plain SHA-256: still not the value, but anyone holding a guess can
 * confirm it, which is why the processes warn at start.
 */
import { createHash, createHmac, createSecretKey, type KeyObject } from 'node:crypto';

/** Header names whose value is a credential, so a `header` client keyed by one is secret by default. */
export const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'x-api-key',
  'api-key',
  'x-auth-token',
]);

/** The marker after `header:` of a hashed key. */
export const SECRET_KEY_MARK = '~';
/** Hex digits of the digest a secret key keeps (96 bits: collisions are not a practical concern). */
export const SECRET_KEY_HEX_DIGITS = 24;
const SECRET_KEY_PATTERN = /^header:~[0-9a-f]{24}$/;
/** Hashed keys remembered per SecretClientKeys (the distinct clients of a busy minute). */
const SECRET_KEYS_KEPT = 10_000;

/** True when a `header` client keyed by `headerName` is a credential (`secret` overrides the list). */
export function isSecretHeader(headerName: string, secret: boolean | undefined): boolean {
  return secret ?? CREDENTIAL_HEADERS.has(headerName.toLowerCase());
}

/** True for a client key already in its hashed form (`header:~` and 24 hex digits). */
export function isSecretClientKey(clientKey: string): boolean {
  return SECRET_KEY_PATTERN.test(clientKey);
}

export class SecretClientKeys {
  readonly #key: KeyObject | undefined;

  /** `secret`: CLIENT_KEY_SECRET; undefined: plain SHA-256 (the caller warns). */
  constructor(secret: string | undefined) {
    this.#key = secret === undefined || secret === '' ? undefined : createSecretKey(Buffer.from(secret));
  }

  /** True when keyed by a secret (an HMAC), false for plain SHA-256. */
  get keyed(): boolean {
    return this.#key !== undefined;
  }

  /**
   * Keys by value: a client sends the same key request after request, and the HMAC (about 2 µs) is
   * the dearest part of keying it. Bounded, and only in this process's memory (never logged or stored).
   */
  readonly #keys = new Map<string, string>();

  /** `header:~<24 hex>` for a header value; undefined when there is none (the request is then keyed by IP). */
  clientKey(value: string | undefined): string | undefined {
    if (value === undefined || value === '') return undefined;
    let key = this.#keys.get(value);
    if (key === undefined) {
      const digest =
        this.#key === undefined
          ? createHash('sha256').update(value).digest('hex')
          : createHmac('sha256', this.#key).update(value).digest('hex');
      key = `header:${SECRET_KEY_MARK}${digest.slice(0, SECRET_KEY_HEX_DIGITS)}`;
      // forgetting everything at once is cheaper than ordering it, and rare
      if (this.#keys.size >= SECRET_KEYS_KEPT) this.#keys.clear();
      this.#keys.set(value, key);
    }
    return key;
  }

  /**
   * A client key an admin typed (`/usage?client=…`, explain): `header:<raw value>` becomes its hashed
   * form when the limit's header is a credential; a key already hashed, or of another kind, is kept.
   */
  lookupKey(clientKey: string, secret: boolean): string {
    if (!secret || !clientKey.startsWith('header:') || isSecretClientKey(clientKey)) return clientKey;
    return this.clientKey(clientKey.slice('header:'.length)) ?? clientKey;
  }
}
