/**
 * The variables of verified identity and secret client keys (docs/configuration.md): the gateway and
 * the rules API both read them, so explain verifies a token and hashes a credential exactly as a
 * gateway does. Declared once here; each process spreads them into its own environment spec.
 */
import { envCustom, envInteger, envText, got, type Parsed } from '../config/env-vars.js';
import type { EnvReading, EnvSpec } from '../config/read-env.js';
import {
  DEFAULT_JWKS_ALGORITHMS,
  DEFAULT_SECRET_ALGORITHMS,
  JWT_ALGORITHMS,
  type JwtConfig,
  MIN_JWT_SECRET_BYTES,
} from './verifier.js';

export const IDENTITY_ENV = {
  JWT_JWKS_URL: envCustom({
    description:
      'where the signing keys of bearer tokens are published (a JWK set); fetched at start and again on an unknown kid, at most once per 30 s',
    accepts: 'http:// or https:// URL',
    parse: (raw): Parsed<string> => {
      let url: URL;
      try {
        url = new URL(raw);
      } catch {
        return { problem: `must be a URL like https://auth.example.com/.well-known/jwks.json ${got(raw)}` };
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:') {
        return { problem: `must start with http:// or https:// ${got(raw)}` };
      }
      return { value: url.href };
    },
  }),
  JWT_SECRET: envCustom({
    description: `instead of JWT_JWKS_URL: the HS256 secret bearer tokens are signed with (tests, demos); at least ${MIN_JWT_SECRET_BYTES} bytes`,
    accepts: `a string of at least ${MIN_JWT_SECRET_BYTES} bytes`,
    secret: true,
    parse: (raw): Parsed<string> =>
      Buffer.byteLength(raw) >= MIN_JWT_SECRET_BYTES
        ? { value: raw }
        : { problem: `must be at least ${MIN_JWT_SECRET_BYTES} bytes (got ${Buffer.byteLength(raw)})` },
  }),
  JWT_ISSUER: envText({ description: 'when set, a token must carry this `iss`' }),
  JWT_AUDIENCE: envText({ description: 'when set, a token must carry this `aud`' }),
  JWT_ALGORITHMS: envCustom({
    description:
      'the signature algorithms accepted (default RS256,ES256,EdDSA with JWT_JWKS_URL, HS256 with JWT_SECRET); none is never accepted',
    accepts: `comma-separated, of ${JWT_ALGORITHMS.join(' ')}`,
    defaultText: 'RS256,ES256,EdDSA or HS256',
    parse: (raw): Parsed<string[]> => {
      const names = raw
        .split(',')
        .map((name) => name.trim())
        .filter((name) => name !== '');
      const known = new Set<string>(JWT_ALGORITHMS);
      const bad = names.filter((name) => !known.has(name));
      if (names.length === 0 || bad.length > 0) {
        return {
          problem: `must list algorithms among ${JWT_ALGORITHMS.join(', ')} (never none) ${got(bad.join(',') || raw)}`,
        };
      }
      return { value: [...new Set(names)] };
    },
  }),
  JWT_CLOCK_TOLERANCE_S: envInteger({
    description: 'seconds of clock skew allowed when checking exp and nbf',
    default: 30,
    min: 0,
    max: 3_600,
  }),
  CLIENT_KEY_SECRET: envText({
    description:
      'the HMAC key credential headers are stored and shown under (header:~<HMAC>); the same on every gateway and the rules API. Unset: plain SHA-256, with a warning',
    secret: true,
  }),
} satisfies EnvSpec;

export interface IdentityConfig {
  /** undefined: no JWT_JWKS_URL or JWT_SECRET, every request is unauthenticated */
  jwt: JwtConfig | undefined;
  clientKeySecret: string | undefined;
}

/** The identity settings of a reading that declared IDENTITY_ENV; cross-variable problems reported on it. */
export function identityConfig(reading: EnvReading<typeof IDENTITY_ENV>): IdentityConfig {
  const jwksUrl = reading.get('JWT_JWKS_URL');
  const secret = reading.get('JWT_SECRET');
  if (reading.isSet('JWT_JWKS_URL') && reading.isSet('JWT_SECRET')) {
    reading.report('JWT_SECRET', 'must not be set together with JWT_JWKS_URL: set one of them');
  }
  const algorithms = reading.get('JWT_ALGORITHMS');
  if (secret !== undefined && algorithms?.some((name) => !name.startsWith('HS'))) {
    reading.report('JWT_ALGORITHMS', 'with JWT_SECRET only HS256, HS384 or HS512 can verify a token');
  }
  if (jwksUrl !== undefined && algorithms?.some((name) => name.startsWith('HS'))) {
    reading.report(
      'JWT_ALGORITHMS',
      'with JWT_JWKS_URL an HS algorithm is refused (a public key must never serve as an HMAC secret)',
    );
  }
  const clientKeySecret = reading.get('CLIENT_KEY_SECRET');
  if (jwksUrl === undefined && secret === undefined) return { jwt: undefined, clientKeySecret };
  return {
    jwt: {
      jwksUrl,
      secret: jwksUrl === undefined ? secret : undefined,
      issuer: reading.get('JWT_ISSUER'),
      audience: reading.get('JWT_AUDIENCE'),
      algorithms:
        algorithms ?? (jwksUrl !== undefined ? [...DEFAULT_JWKS_ALGORITHMS] : [...DEFAULT_SECRET_ALGORITHMS]),
      clockToleranceS: reading.get('JWT_CLOCK_TOLERANCE_S') ?? 30,
    },
    clientKeySecret,
  };
}
