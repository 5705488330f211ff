/**
 * `POST /rules/explain` with the gateways' JWT_* and CLIENT_KEY_SECRET (docs/rules.md, "Verified
 * identity"): a bearer token in the explained request is verified as a gateway would verify it, and the
 * answer shows the claims the rules were matched and keyed with, or why the token did not verify.
 */
import { createHmac } from 'node:crypto';
import { SecretClientKeys } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Backend, createRule, postgresBackend, reader, startApp } from './support/app.js';

const JWT_SECRET = 'explain-identity-secret-of-32-bytes!';
const CLIENT_KEY_SECRET = 'explain-identity-client-keys';

/** An HS256 token (signed with node:crypto here; the API verifies it with jose). */
function hs256(claims: Record<string, unknown>, secret = JWT_SECRET): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const body = `${part({ alg: 'HS256', typ: 'JWT' })}.${part(claims)}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}
const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

let backend: Backend;
let app: FastifyInstance;
let bare: FastifyInstance;

beforeAll(async () => {
  backend = await postgresBackend();
  app = await startApp(backend, { JWT_SECRET, CLIENT_KEY_SECRET });
  bare = await startApp(backend);
  await createRule(app, {
    name: 'account',
    match: { path: '/account/**' },
    limits: [{ name: 'per-sub', client: { by: 'jwt' }, capacity: 3, refill: 3, period: '1m' }],
  });
  await createRule(app, {
    name: 'account-pro',
    match: { path: '/account/**', claims: { plan: 'pro' } },
    limits: [{ name: 'per-sub', client: { by: 'jwt' }, capacity: 10, refill: 10, period: '1m' }],
  });
  await createRule(app, {
    name: 'keys',
    match: { path: '/keys/**' },
    client: { by: 'header', name: 'x-api-key' },
    limit: { capacity: 3, refill: 3, period: '1m' },
  });
});
afterAll(async () => {
  await app?.close();
  await bare?.close();
  await backend?.cleanup();
});

const explain = (on: FastifyInstance, headers: Record<string, string>, path = '/account/me') =>
  on.inject({
    method: 'POST',
    url: '/rules/explain',
    headers: reader,
    payload: { method: 'GET', path, headers, clientIp: '203.0.113.9' },
  });

describe('explain with JWT_SECRET', () => {
  it('shows the verified claims, and keys and matches with them', async () => {
    const token = hs256({ sub: 'alice', plan: 'pro', exp: inAnHour() });
    const res = await explain(app, { authorization: `Bearer ${token}` });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({
      rule: { name: 'account-pro' },
      limits: [{ name: 'per-sub', clientKey: 'jwt:alice' }],
      identity: { authenticated: true, claims: { sub: 'alice', plan: 'pro' } },
    });
  });

  it.each([
    ['expired', hs256({ sub: 'alice', plan: 'pro', exp: Math.floor(Date.now() / 1000) - 600 }), 'expired'],
    [
      'signed with another secret',
      hs256({ sub: 'alice', plan: 'pro', exp: inAnHour() }, 'x'.repeat(40)),
      'bad_signature',
    ],
    ['malformed', 'not-a-jwt', 'malformed'],
  ])('a token %s: keyed by IP, no claim matches, and the reason', async (_name, token, reason) => {
    const res = await explain(app, { authorization: `Bearer ${token}` });
    expect(res.json()).toMatchObject({
      rule: { name: 'account' },
      limits: [{ clientKey: 'ip:203.0.113.9' }],
      identity: { authenticated: false, reason },
    });
    expect(res.json().considered).toContainEqual({
      name: 'account-pro',
      matched: false,
      reason: 'claim plan needs a verified bearer token',
    });
  });

  it('says when the rules API has no JWT_* to verify with', async () => {
    const token = hs256({ sub: 'alice', plan: 'pro', exp: inAnHour() });
    const res = await explain(bare, { authorization: `Bearer ${token}` });
    expect(res.json()).toMatchObject({
      rule: { name: 'account' },
      identity: { authenticated: false, reason: 'not configured' },
    });
  });

  it('keys a credential header by its HMAC under CLIENT_KEY_SECRET, as the gateways do', async () => {
    const res = await explain(app, { 'x-api-key': 'sk_live_explained' }, '/keys/x');
    expect(res.json().limits[0].clientKey).toBe(
      new SecretClientKeys(CLIENT_KEY_SECRET).clientKey('sk_live_explained'),
    );
    expect(res.body).not.toContain('sk_live_explained');
  });
});
