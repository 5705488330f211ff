import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  admin,
  type Backend,
  createRule,
  expectError,
  postgresBackend,
  reader,
  startApp,
} from './support/app.js';

let backend: Backend;
let app: FastifyInstance;

beforeAll(async () => {
  backend = await postgresBackend();
  app = await startApp(backend);
});
afterAll(async () => {
  await app?.close();
  await backend?.cleanup();
});

const explain = (payload: unknown, headers: Record<string, string> = reader) =>
  app.inject({ method: 'POST', url: '/rules/explain', headers, payload: payload as object });

describe('POST /rules/explain', () => {
  it('answers with the rule, its limits and the rules considered, for the read token', async () => {
    const search = await createRule(app, {
      name: 'search',
      match: { path: '/search/**' },
      limits: [
        {
          name: 'burst',
          client: { by: 'header', name: 'x-api-key' },
          capacity: 20,
          refill: 10,
          period: '1s',
        },
        { name: 'daily', algorithm: 'sliding-window', max: 1000, window: '1d' },
      ],
    });
    await createRule(app, {
      name: 'search-free',
      match: { path: '/search/**', headers: { 'x-tier': 'free' } },
      limit: { capacity: 5, refill: 1, period: '1s' },
      priority: 5,
    });
    const res = await explain({
      method: 'GET',
      host: 'api.example.com',
      path: '/search//a/../b?q=1',
      headers: { 'x-api-key': 'k-1', 'x-tier': 'pro' },
      clientIp: '2001:db8:1:2::7',
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({
      path: '/search/b',
      error: null,
      host: 'api.example.com',
      rule: { id: search.id, name: 'search' },
      unlimited: false,
      limits: [
        // x-api-key is a credential: its digest, never the value (docs/rules.md, "Secret client keys")
        {
          name: 'burst',
          algorithm: 'token-bucket',
          clientKey: expect.stringMatching(/^header:~[0-9a-f]{24}$/),
        },
        { name: 'daily', algorithm: 'sliding-window', clientKey: 'ip:2001:db8:1:2::/64' },
      ],
      considered: [
        { name: 'search', matched: true, reason: 'chosen (enforced)' },
        { name: 'search-free', matched: false, reason: 'header x-tier is not "free"' },
      ],
      identity: { authenticated: false, reason: 'no bearer token' },
    });
    expect(res.body).not.toContain('k-1');
  });

  it('follows a change of the rule set at once (compiled per rule-set version)', async () => {
    const before = await explain({ method: 'GET', path: '/search/x', headers: { 'x-tier': 'free' } });
    expect(before.json().rule.name).toBe('search-free');
    const rule = (await app.inject({ method: 'GET', url: '/rules?limit=10', headers: admin }))
      .json()
      .items.find((r: { name: string }) => r.name === 'search-free');
    const { id, version, createdAt, updatedAt, ...fields } = rule;
    const put = await app.inject({
      method: 'PUT',
      url: `/rules/${id}`,
      headers: { ...admin, 'if-match': `"${version}"` },
      payload: { ...fields, enabled: false },
    });
    expect(put.statusCode, put.body).toBe(200);
    const after = await explain({ method: 'GET', path: '/search/x', headers: { 'x-tier': 'free' } });
    expect(after.json().rule.name).toBe('search');
    expect(after.json().considered).toContainEqual({
      name: 'search-free',
      matched: false,
      reason: 'rule is disabled',
    });
  });

  it("answers an unsafe path with the normaliser's code, in a 200", async () => {
    const res = await explain({ method: 'GET', path: '/a/%2F/b' }, admin);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      path: null,
      error: { statusCode: 400, code: 'PATH_ENCODED_SLASH' },
      rule: null,
      limits: [],
      considered: [],
    });
  });

  it('answers no rule for a path no rule takes', async () => {
    const res = await explain({ method: 'GET', path: '/elsewhere', clientIp: '203.0.113.7' });
    expect(res.json()).toMatchObject({ rule: null, unlimited: false, limits: [], considered: [] });
  });

  it.each([
    ['missing method', { path: '/' }, "'method'"],
    ['missing path', { method: 'GET' }, "'path'"],
    ['bad clientIp', { method: 'GET', path: '/', clientIp: 'not-an-ip' }, 'body/clientIp'],
    ['unknown field', { method: 'GET', path: '/', query: 'x' }, "'query'"],
    ['method with a space', { method: 'G ET', path: '/' }, 'body/method'],
    ['header value not a string', { method: 'GET', path: '/', headers: { 'x-a': 1 } }, 'body/headers'],
  ])('refuses a body with %s: 400 naming the field', async (_label, payload, fragment) => {
    const body = expectError(await explain(payload), 400);
    expect(body.message).toContain(fragment);
  });

  it('needs a token', async () => {
    expectError(await explain({ method: 'GET', path: '/' }, {}), 401);
    expectError(await explain({ method: 'GET', path: '/' }, { authorization: 'Bearer wrong' }), 401);
  });
});
