/**
 * The verifier on its own (the gateway's identity tests run every bad-token case through HTTP): the
 * bearer header read, a verified token kept until its `exp` and no longer, failures never cached, and
 * a JWKS that cannot be fetched failing fast between fetches instead of holding every request.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';
import { bearerToken, TokenVerifier } from './verifier.js';

const SECRET = 'verifier-test-secret-of-32-bytes!!';
const sign = (claims: Record<string, unknown>, expSeconds: number, secret = SECRET) =>
  new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime(Math.floor(Date.now() / 1000) + expSeconds)
    .sign(new TextEncoder().encode(secret));

describe('bearerToken', () => {
  it.each([
    ['Bearer abc.def.ghi', 'abc.def.ghi'],
    ['bearer abc.def.ghi', 'abc.def.ghi'],
    ['BEARER   abc.def.ghi  ', 'abc.def.ghi'],
    ['Bearer', undefined],
    ['Bearer ', undefined],
    ['Basic YWxpY2U6cHJv', undefined],
    ['Bearerabc.def.ghi', undefined],
    ['Bearer a b', undefined],
    [undefined, undefined],
  ])('%j → %j', (header, token) => {
    expect(bearerToken(header)).toBe(token);
  });
});

describe('TokenVerifier', () => {
  it('keeps a verified token until its exp, then verifies it again (and refuses it)', async () => {
    const verifier = new TokenVerifier({ secret: SECRET, algorithms: ['HS256'], clockToleranceS: 0 });
    const token = await sign({ sub: 'alice' }, 2);
    expect(verifier.cached(token)).toBeUndefined();
    expect(await verifier.verify(token)).toMatchObject({ ok: true, claims: { sub: 'alice' } });
    expect(verifier.cached(token)).toMatchObject({ sub: 'alice' });
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(verifier.cached(token)).toBeUndefined();
    expect(await verifier.verify(token)).toMatchObject({ ok: false, reason: 'expired' });
  });

  it('never caches a token that failed', async () => {
    const verifier = new TokenVerifier({ secret: SECRET, algorithms: ['HS256'], clockToleranceS: 0 });
    const forged = await sign({ sub: 'mallory' }, 60, 'another-secret-of-at-least-32-bytes');
    expect(await verifier.verify(forged)).toMatchObject({ ok: false, reason: 'bad_signature' });
    expect(verifier.cached(forged)).toBeUndefined();
  });

  describe('with a JWKS that cannot be fetched', () => {
    let fetches = 0;
    const server = createServer((_req, res) => {
      fetches++;
      res.writeHead(503).end();
    });
    afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it('fetches at most once per cool-down and fails the tokens between fetches at once', async () => {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
      const errors: Error[] = [];
      const verifier = new TokenVerifier(
        { jwksUrl: url, algorithms: ['RS256'], clockToleranceS: 0 },
        { jwksCooldownMs: 60_000, onJwksError: (error) => errors.push(error) },
      );
      await verifier.start();
      expect(fetches).toBe(1);
      const token = 'eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLW5vdC1jaGVja2Vk';
      const outcomes = await Promise.all(Array.from({ length: 20 }, () => verifier.verify(token)));
      expect(outcomes.every((o) => !o.ok && o.reason === 'jwks_unavailable')).toBe(true);
      // the 20 tokens did not each fetch: the cool-down holds
      expect(fetches).toBe(1);
      expect(errors).toHaveLength(1);
      expect(errors[0]!.message).toContain('503');
    });
  });
});
