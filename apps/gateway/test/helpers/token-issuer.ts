/**
 * A token issuer for tests: real key pairs (RS256, EdDSA, and a stranger's RS256 key no JWKS lists),
 * a JWKS served over HTTP on 127.0.0.1 whose keys a test can rotate or take down, and signed tokens.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type CryptoKey, exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from 'jose';

export const ISSUER = 'https://issuer.sluice.test';
export const AUDIENCE = 'sluice-gateway';

export interface SigningKey {
  kid: string;
  alg: 'RS256' | 'EdDSA';
  privateKey: CryptoKey;
  jwk: JWK;
}

export async function signingKey(kid: string, alg: 'RS256' | 'EdDSA'): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, alg, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

export interface SignOptions {
  /** seconds from now (negative: already expired); default one hour */
  expiresIn?: number;
  /** seconds from now the token becomes valid */
  notBeforeIn?: number;
  issuer?: string;
  audience?: string;
  /** the kid written in the header (default the key's) */
  kid?: string;
}

export async function sign(key: SigningKey, claims: JWTPayload, options: SignOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, kid: options.kid ?? key.kid, typ: 'JWT' })
    .setIssuedAt(now)
    .setIssuer(options.issuer ?? ISSUER)
    .setAudience(options.audience ?? AUDIENCE)
    .setExpirationTime(now + (options.expiresIn ?? 3600));
  if (options.notBeforeIn !== undefined) jwt.setNotBefore(now + options.notBeforeIn);
  return jwt.sign(key.privateKey);
}

/** HS256 with a shared secret (JWT_SECRET). */
export async function signWithSecret(
  secret: string,
  claims: JWTPayload,
  options: SignOptions = {},
): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt(now)
    .setExpirationTime(now + (options.expiresIn ?? 3600));
  if (options.issuer !== undefined) jwt.setIssuer(options.issuer);
  if (options.audience !== undefined) jwt.setAudience(options.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}

/** `alg: none`: a token with no signature at all. */
export function unsignedToken(claims: JWTPayload): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  return `${part({ alg: 'none', typ: 'JWT' })}.${part({ iss: ISSUER, aud: AUDIENCE, exp: now + 3600, ...claims })}.`;
}

export interface JwksServer {
  url: string;
  /** what the JWKS lists now */
  keys: SigningKey[];
  /** false: every fetch answers 503 (an outage) */
  up: boolean;
  fetches: number;
  close(): Promise<void>;
}

export async function serveJwks(keys: SigningKey[]): Promise<JwksServer> {
  const state = { keys, up: true, fetches: 0 };
  const server: Server = createServer((_req, res) => {
    state.fetches++;
    if (!state.up) {
      res.writeHead(503).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/jwk-set+json' });
    res.end(JSON.stringify({ keys: state.keys.map((key) => key.jwk) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;
  return Object.assign(state, {
    url,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }) as JwksServer;
}
