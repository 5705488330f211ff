/**
 * The route tests of the rules API (docs/rules-api.md), written once and run against Postgres (`routes.pg.int.test.ts`) and
 * PGlite (`routes.pglite.test.ts`).
 */
import { deflateSync, gunzipSync, gzipSync } from 'node:zlib';
import type { Rule, RuleInput } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  admin,
  type Backend,
  createRule,
  expectError,
  type MakeBackend,
  READ_TOKEN,
  reader,
  ruleInput,
  startApp,
} from './support/app.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

const VALID = {
  name: 'valid-name',
  match: { path: '/valid' },
  limit: { capacity: 1, refill: 1, period: '1s' },
};
/** A valid body with some top-level fields replaced. */
const valid = (patch: Record<string, unknown>) => ({ ...VALID, ...patch });
/** A valid body without one top-level field. */
function without(key: keyof typeof VALID) {
  const { [key]: _, ...rest } = VALID;
  return rest;
}
const limit = (patch: Record<string, unknown>) => valid({ limit: { ...VALID.limit, ...patch } });
const match = (patch: Record<string, unknown>) => valid({ match: { ...VALID.match, ...patch } });

/** Invalid bodies and a fragment the 400's message must contain to name the field. */
export const INVALID_BODIES: Array<[string, unknown, string]> = [
  ['missing name', without('name'), "'name'"],
  ['missing match', without('match'), "'match'"],
  ['missing limit', without('limit'), "'limit'"],
  ['missing limit.capacity', valid({ limit: { refill: 1, period: '1s' } }), "'capacity'"],
  ['missing match.path', valid({ match: { methods: ['GET'] } }), "'path'"],
  ['upper-case name', valid({ name: 'Orders' }), 'body/name'],
  ['name too long', valid({ name: 'a'.repeat(65) }), 'body/name'],
  ['name starting with -', valid({ name: '-orders' }), 'body/name'],
  ['name not a string', valid({ name: 42 }), 'body/name'],
  ['unknown top-level field', valid({ burst: 5 }), "'burst'"],
  ['unknown field in limit', limit({ burst: 2 }), "'burst'"],
  ['unknown field in match', match({ query: 'x=1' }), "'query'"],
  ['server field id', valid({ id: '00000000-0000-4000-8000-000000000001' }), "'id'"],
  ['server field version', valid({ version: 7 }), "'version'"],
  ['path without leading /', match({ path: 'orders' }), 'body/match/path'],
  ['path with ?', match({ path: '/orders?x=1' }), 'body/match/path'],
  ['path with %', match({ path: '/orders/%2F' }), 'body/match/path'],
  ['path with a space', match({ path: '/or ders' }), 'body/match/path'],
  ['path with a backslash', match({ path: '/a\\b' }), 'body/match/path'],
  ['path with ** in the middle', match({ path: '/a/**/b' }), 'body/match/path'],
  ['path with an empty segment', match({ path: '/a//b' }), 'body/match/path'],
  ['path with ..', match({ path: '/a/../b' }), 'body/match/path'],
  ['path too long', match({ path: `/${'a'.repeat(512)}` }), 'body/match/path'],
  ['unknown method', match({ methods: ['FETCH'] }), 'body/match/methods/0'],
  ['methods not an array', match({ methods: 'GET' }), 'body/match/methods'],
  ['duplicate methods', match({ methods: ['GET', 'GET'] }), 'body/match/methods'],
  ['host with a space', match({ host: 'exa mple.com' }), 'body/match/host'],
  ['unknown client.by', valid({ client: { by: 'cookie' } }), 'body/client/by'],
  ['header client without name', valid({ client: { by: 'header' } }), 'body/client/name'],
  ['ip client with a name', valid({ client: { by: 'ip', name: 'x-api-key' } }), 'body/client/name'],
  ['invalid header name', valid({ client: { by: 'header', name: 'x api key' } }), 'body/client/name'],
  ['capacity 0', limit({ capacity: 0 }), 'body/limit/capacity'],
  ['negative capacity', limit({ capacity: -5 }), 'body/limit/capacity'],
  ['capacity as a string', limit({ capacity: '10' }), 'body/limit/capacity'],
  ['capacity too large', limit({ capacity: 1e13 }), 'body/limit/capacity'],
  ['refill 0', limit({ refill: 0 }), 'body/limit/refill'],
  ['period in words', limit({ period: '5 minutes' }), 'body/limit/period'],
  ['period 0', limit({ period: 0 }), 'body/limit/period'],
  ['fractional period of ms', limit({ period: 1.5 }), 'body/limit/period'],
  ['period over a year', limit({ period: '400d' }), 'body/limit/period'],
  ['period 0s', limit({ period: '0s' }), 'body/limit/period'],
  ['cost 0', valid({ cost: 0 }), 'body/cost'],
  ['negative maxDebt', valid({ maxDebt: -1 }), 'body/maxDebt'],
  ['enabled as a string', valid({ enabled: 'true' }), 'body/enabled'],
  ['shadow as a number', valid({ shadow: 1 }), 'body/shadow'],
  ['fractional priority', valid({ priority: 1.5 }), 'body/priority'],
  ['description too long', valid({ description: 'd'.repeat(1001) }), 'body/description'],
];

export function describeRoutes(label: string, makeBackend: MakeBackend) {
  describe(`rules API routes on ${label}`, () => {
    let backend: Backend;
    let app: FastifyInstance;

    beforeAll(async () => {
      backend = await makeBackend();
      app = await startApp(backend);
    });
    afterAll(async () => {
      await app?.close();
      await backend?.cleanup();
    });

    const get = (url: string, headers: Record<string, string> = admin) =>
      app.inject({ method: 'GET', url, headers });
    const countRules = async () => (await get('/rules/snapshot')).json().rules.length as number;
    const snapshotVersion = async () => (await get('/rules/snapshot')).json().version as number;

    describe('POST /rules', () => {
      it('creates a rule with defaults, 201, Location and ETag', async () => {
        const input = ruleInput({ match: { path: '/orders/**', methods: ['GET', 'POST'] } });
        const res = await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: input });
        expect(res.statusCode, res.body).toBe(201);
        const rule = res.json();
        expect(rule.id).toMatch(UUID);
        expect(res.headers.location).toBe(`/rules/${rule.id}`);
        expect(res.headers.etag).toBe('"1"');
        expect(rule).toEqual({
          id: rule.id,
          name: input.name,
          match: { path: '/orders/**', methods: ['GET', 'POST'] },
          client: { by: 'ip' },
          limit: { capacity: 10, refill: 5, period: '1s' },
          cost: 1,
          maxDebt: 10,
          enabled: true,
          shadow: false,
          priority: 0,
          version: 1,
          createdAt: expect.any(String),
          updatedAt: rule.createdAt,
        });
        expect(new Date(rule.createdAt).toISOString()).toBe(rule.createdAt);
        const again = await get(`/rules/${rule.id}`);
        expect(again.json()).toEqual(rule);
      });

      it('stores every optional field as given', async () => {
        const input: RuleInput = ruleInput({
          description: 'Order API, per API key',
          match: { path: '/orders/*/items/**', methods: ['DELETE'], host: 'api.example.com' },
          client: { by: 'header', name: 'x-api-key' },
          limit: { capacity: 100, refill: 100, period: 60_000 },
          cost: 2.5,
          maxDebt: 0,
          enabled: false,
          shadow: true,
          priority: -3,
        });
        const rule = await createRule(app, input);
        const { id, version, createdAt, updatedAt, ...fields } = rule;
        expect(fields).toEqual(input);
        expect(version).toBe(1);
      });

      it('answers 409 when the name is taken, and stores nothing', async () => {
        const first = await createRule(app);
        const before = await countRules();
        const res = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: admin,
          payload: ruleInput({ name: first.name }),
        });
        const body = expectError(res, 409);
        expect(body.message).toContain(first.name);
        expect(await countRules()).toBe(before);
      });

      it('rejects the read token with 403 and no token with 401', async () => {
        const before = await countRules();
        const asReader = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: reader,
          payload: ruleInput(),
        });
        expectError(asReader, 403);
        const anonymous = await app.inject({ method: 'POST', url: '/rules', payload: ruleInput() });
        expectError(anonymous, 401);
        expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer/);
        expect(await countRules()).toBe(before);
      });

      it('answers 415 for a non-JSON body, 400 for broken JSON, 413 for a huge body', async () => {
        const text = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: { ...admin, 'content-type': 'text/plain' },
          payload: 'name=x',
        });
        expectError(text, 415);
        const broken = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: { ...admin, 'content-type': 'application/json' },
          payload: '{"name": ',
        });
        expectError(broken, 400);
        const huge = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: admin,
          payload: { ...ruleInput(), description: 'x'.repeat(100 * 1024) },
        });
        expectError(huge, 413);
        const proto = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: { ...admin, 'content-type': 'application/json' },
          payload: `{"name":"p","match":{"path":"/"},"limit":{"capacity":1,"refill":1,"period":"1s"},"__proto__":{"x":1}}`,
        });
        expectError(proto, 400);
        const empty = await app.inject({
          method: 'POST',
          url: '/rules',
          headers: { ...admin, 'content-type': 'application/json' },
        });
        expect(expectError(empty, 400).message).toContain('body');
      });
    });

    describe('invalid bodies', () => {
      it(`has a corpus of at least 25 cases`, () => {
        expect(INVALID_BODIES.length).toBeGreaterThanOrEqual(25);
      });

      it('answers every invalid body 400 naming the field, on POST and PUT, and changes nothing', async () => {
        const existing = await createRule(app);
        const rulesBefore = (await get('/rules/snapshot')).json();
        for (const [what, body, field] of INVALID_BODIES) {
          const payload = body as Record<string, unknown>;
          const post = await app.inject({ method: 'POST', url: '/rules', headers: admin, payload });
          expect(post.statusCode, `${what}: ${post.body}`).toBe(400);
          expect(expectError(post, 400).message, what).toContain(field);
          const put = await app.inject({
            method: 'PUT',
            url: `/rules/${existing.id}`,
            headers: admin,
            payload,
          });
          expect(put.statusCode, `${what} (PUT): ${put.body}`).toBe(400);
          expect(expectError(put, 400).message, what).toContain(field);
        }
        const rulesAfter = (await get('/rules/snapshot')).json();
        expect(rulesAfter).toEqual(rulesBefore);
        expect((await get(`/rules/${existing.id}/history`)).json().items).toHaveLength(1);
      });

      it('rejects non-object bodies', async () => {
        for (const payload of ['[]', '"rule"', 'null', '42']) {
          const res = await app.inject({
            method: 'POST',
            url: '/rules',
            headers: { ...admin, 'content-type': 'application/json' },
            payload,
          });
          expect(expectError(res, 400).message, payload).toMatch(/^body /);
        }
      });
    });

    describe('values the database or JavaScript objects cannot take', () => {
      /** Raw JSON text, so that escapes such as `\u0000` reach the server exactly as written. */
      const send = (method: 'POST' | 'PUT', url: string, payload: string, headers = {}) =>
        app.inject({
          method,
          url,
          headers: { ...admin, 'content-type': 'application/json', ...headers },
          payload,
        });
      const body = (patch: string) =>
        `{"name":"nul-test","match":{"path":"/nul"},"limit":{"capacity":1,"refill":1,"period":"1s"}${patch}}`;

      /** A body fragment and the field the 400 must name. */
      const NUL_BODIES: Array<[string, string]> = [
        [',"description":"a\\u0000b"', 'body/description '],
        [',"description":"\\u0000"', 'body/description '],
        [',"client":{"by":"header","name":"x-key\\u0000"}', 'body/client/name '],
        [',"match":{"path":"/nul","methods":["GET","\\u0000"]}', 'body/match/methods/1 '],
        [',"match":{"path":"/nul","host":"a\\u0000.example"}', 'body/match/host '],
        // a field no schema knows yet: refused wherever it is nested
        [',"future":{"list":[{"deep":"x\\u0000"}]}', 'body/future/list/0/deep '],
        [',"match":{"path":"/nul","a/b~c":"\\u0000"}', 'body/match/a~1b~0c '],
      ];

      it('answers 400 naming the field for a NUL in any string, on POST and PUT, and stores nothing', async () => {
        const existing = await createRule(app);
        const before = (await get('/rules/snapshot')).json();
        for (const [patch, field] of NUL_BODIES) {
          for (const [method, url] of [
            ['POST', '/rules'],
            ['PUT', `/rules/${existing.id}`],
          ] as const) {
            const res = await send(method, url, body(patch));
            const error = expectError(res, 400);
            expect(error.message, `${method} ${patch}`).toContain(field);
            expect(error.message).toContain('NUL');
            expect(error.code).toBe('SLUICE_VALIDATION');
          }
        }
        const name = await send('POST', '/rules', body('').replace('nul-test', 'nul\\u0000test'));
        expect(expectError(name, 400).message).toMatch(/^body\/name .*NUL/);
        const key = await send('POST', '/rules', body(',"match":{"path":"/nul","a\\u0000":1}'));
        expect(expectError(key, 400).message).toMatch(/^body\/match has a key .*NUL/);
        expect((await get('/rules/snapshot')).json()).toEqual(before);
      });

      it('answers 400 for a lone surrogate, which Postgres would refuse or silently replace', async () => {
        const res = await send('POST', '/rules', body(',"description":"broken \\ud800 text"'));
        const error = expectError(res, 400);
        expect(error.message).toContain('body/description');
        expect(error.message).toContain('lone surrogate');
        const paired = await send('POST', '/rules', body(',"description":"paired \\ud83d\\ude00"'));
        expect(paired.statusCode, paired.body).toBe(201);
        expect(paired.json().description).toBe('paired \u{1f600}');
      });

      it('answers 400 naming a __proto__ or constructor key, wherever it is', async () => {
        const cases: Array<[string, string]> = [
          [',"__proto__":{"enabled":false}', "body must not have the key '__proto__'"],
          [',"constructor":{"prototype":{"x":1}}', "body must not have the key 'constructor'"],
          [',"constructor":1', "body must not have the key 'constructor'"],
          [',"client":{"by":"ip","__proto__":{}}', "body/client must not have the key '__proto__'"],
          [',"\\u005f_proto__":1', "body must not have the key '__proto__'"],
        ];
        for (const [patch, message] of cases) {
          const error = expectError(await send('POST', '/rules', body(patch)), 400);
          expect(error.message, patch).toContain(message);
          expect(error.message, patch).toMatch(/prototype|constructor every/);
          expect(error.code).toBe('SLUICE_VALIDATION');
        }
      });

      it('answers 415 for a compressed body, naming the encoding; identity is plain JSON', async () => {
        const json = JSON.stringify(ruleInput());
        for (const [encoding, payload] of [
          ['gzip', gzipSync(json)],
          ['deflate', deflateSync(json)],
          ['br', Buffer.from(json)],
          ['GZIP, identity', gzipSync(json)],
        ] as const) {
          const res = await app.inject({
            method: 'POST',
            url: '/rules',
            headers: { ...admin, 'content-type': 'application/json', 'content-encoding': encoding },
            payload,
          });
          const error = expectError(res, 415);
          expect(error.code).toBe('SLUICE_UNSUPPORTED_ENCODING');
          expect(error.message, encoding).toContain(encoding.split(',')[0]!.toLowerCase());
          expect(res.headers['accept-encoding']).toBe('identity');
        }
        const plain = await send('POST', '/rules', json, { 'content-encoding': 'identity' });
        expect(plain.statusCode, plain.body).toBe(201);
      });

      it('answers 400 SLUICE_INVALID_CURSOR for a cursor holding a NUL or a lone surrogate', async () => {
        const cursorOf = (position: unknown) =>
          Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
        for (const position of [{ after: 'a\u0000b' }, { after: '\u0000' }, { after: 'x\ud800' }]) {
          const res = await get(`/rules?cursor=${cursorOf(position)}`);
          const error = expectError(res, 400);
          expect(error.code, JSON.stringify(position)).toBe('SLUICE_INVALID_CURSOR');
          expect(error.message).toContain('cursor');
        }
        const rule = await createRule(app);
        const history = await get(`/rules/${rule.id}/history?cursor=${cursorOf({ before: '1\u0000' })}`);
        expect(expectError(history, 400).code).toBe('SLUICE_INVALID_CURSOR');
      });
    });

    describe('GET /rules/{id}', () => {
      it('answers the rule with its ETag; the read token may read', async () => {
        const rule = await createRule(app);
        const res = await get(`/rules/${rule.id}`, reader);
        expect(res.statusCode).toBe(200);
        expect(res.headers.etag).toBe('"1"');
        expect(res.json()).toEqual(rule);
      });

      it('answers 404 for an unknown id and for a non-UUID', async () => {
        expect(expectError(await get(`/rules/${UNKNOWN_ID}`), 404).message).toContain(UNKNOWN_ID);
        expectError(await get('/rules/not-a-uuid'), 404);
      });

      it('answers 401 without a token or with a wrong one, naming no token', async () => {
        const rule = await createRule(app);
        const none = await get(`/rules/${rule.id}`, {});
        expectError(none, 401);
        expect(none.headers['www-authenticate']).toMatch(/^Bearer/);
        const wrong = await get(`/rules/${rule.id}`, { authorization: `Bearer ${ADMIN_TOKEN}x` });
        expectError(wrong, 401);
        const basic = await get(`/rules/${rule.id}`, { authorization: `Basic ${ADMIN_TOKEN}` });
        expectError(basic, 401);
        expect(none.body + wrong.body).not.toContain(ADMIN_TOKEN);
        const lowerScheme = await get(`/rules/${rule.id}`, { authorization: `bearer ${ADMIN_TOKEN}` });
        expect(lowerScheme.statusCode).toBe(200);
      });
    });

    describe('GET /rules', () => {
      it('lists by name (byte order), pages with cursors, filters on enabled', async () => {
        const prefix = `list${Date.now() % 100000}`;
        const names = ['b', 'a-c', 'ab', 'a.b', 'a_b', '0z', 'a9'].map((s) => `${prefix}-${s}`);
        for (const [i, name] of names.entries()) {
          await createRule(app, ruleInput({ name, enabled: i % 2 === 0 }));
        }
        const all = (await get('/rules?limit=1000')).json();
        const listed = (all.items as Rule[]).map((r) => r.name).filter((n) => n.startsWith(prefix));
        expect(listed).toEqual([...names].sort());
        const allNames = (all.items as Rule[]).map((r) => r.name);
        expect(allNames).toEqual([...allNames].sort());
        expect(all.nextCursor).toBeNull();

        const paged: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const url: string = `/rules?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
          const page = (await get(url, reader)).json();
          expect(page.items.length).toBeLessThanOrEqual(2);
          paged.push(...page.items.map((r: Rule) => r.name));
          cursor = page.nextCursor;
          pages += 1;
        } while (cursor !== null && pages < 1000);
        expect(paged).toEqual(allNames);

        const enabled = (await get('/rules?enabled=true&limit=1000')).json().items as Rule[];
        const disabled = (await get('/rules?enabled=false&limit=1000')).json().items as Rule[];
        expect(enabled.every((r) => r.enabled)).toBe(true);
        expect(disabled.every((r) => !r.enabled)).toBe(true);
        expect(enabled.length + disabled.length).toBe(allNames.length);
        expect(disabled.map((r) => r.name).filter((n) => n.startsWith(prefix))).toEqual(
          names.filter((_, i) => i % 2 === 1).sort(),
        );
      });

      it('pages 100 rules by default', async () => {
        await app.repository.createMany(
          Array.from({ length: 101 }, (_, i) => ({
            name: `bulk-${String(i).padStart(3, '0')}`,
            match: { path: `/bulk/${i}` },
            client: { by: 'ip' as const },
            limit: { capacity: 1, refill: 1, period: '1s' },
            cost: 1,
            maxDebt: 1,
            enabled: true,
            shadow: false,
            priority: 0,
          })),
          'admin',
        );
        const first = (await get('/rules')).json();
        expect(first.items).toHaveLength(100);
        expect(typeof first.nextCursor).toBe('string');
      });

      it("serves each listed rule's limits in words beside the rules, by rule id, never inside them", async () => {
        const prefix = `sum${Date.now() % 100000}`;
        const stacked = await createRule(
          app,
          ruleInput({
            name: `${prefix}-stacked`,
            limit: undefined,
            limits: [
              {
                name: 'burst',
                client: { by: 'header', name: 'X-Api-Key' },
                capacity: 20,
                refill: 10,
                period: '1s',
              },
              { name: 'daily', algorithm: 'sliding-window', max: 10_000, window: '1d' },
              { name: 'inflight', client: { by: 'global' }, algorithm: 'concurrency', max: 5 },
            ],
          }),
        );
        const free = await createRule(
          app,
          ruleInput({ name: `${prefix}-free`, limit: undefined, unlimited: true, priority: 5 }),
        );
        const page = (await get(`/rules?limit=1000`, reader)).json();
        expect(page.summaries[stacked.id]).toEqual([
          'burst: 20 per x-api-key, 10 more every 1s (token bucket)',
          'daily: 10000 per client IP in any 1d (sliding window)',
          'inflight: 5 at once for all clients together',
        ]);
        expect(page.summaries[free.id]).toEqual(['no limit']);
        expect(Object.keys(page.summaries).sort()).toEqual(page.items.map((rule: Rule) => rule.id).sort());
        // the rules themselves are exactly what GET /rules/{id} returns (and PUT takes back)
        const listed = page.items.find((rule: Rule) => rule.id === stacked.id);
        expect(listed).toEqual((await get(`/rules/${stacked.id}`)).json());
        expect(listed).not.toHaveProperty('summary');
      });

      it('answers 400 naming the parameter for a bad limit, enabled or cursor', async () => {
        for (const query of ['limit=0', 'limit=1001', 'limit=abc', 'limit=1.5', 'limit=-1']) {
          expect(expectError(await get(`/rules?${query}`), 400).message, query).toContain('limit');
        }
        for (const query of ['enabled=yes', 'enabled=1x', 'enabled=']) {
          expect(expectError(await get(`/rules?${query}`), 400).message, query).toContain('enabled');
        }
        for (const query of ['cursor=nonsense!', 'cursor=bm90LWpzb24', `cursor=${'A'.repeat(600)}`]) {
          expect(expectError(await get(`/rules?${query}`), 400).message, query).toContain('cursor');
        }
      });
    });

    describe('PUT /rules/{id}', () => {
      it('replaces every writable field; omitted optional fields go back to their defaults', async () => {
        const rule = await createRule(
          app,
          ruleInput({ description: 'old', maxDebt: 3, cost: 2, shadow: true, client: { by: 'global' } }),
        );
        const input = ruleInput({ limit: { capacity: 50, refill: 1, period: '1m' } });
        const res = await app.inject({
          method: 'PUT',
          url: `/rules/${rule.id}`,
          headers: admin,
          payload: input,
        });
        expect(res.statusCode, res.body).toBe(200);
        expect(res.headers.etag).toBe('"2"');
        const updated = res.json();
        expect(updated).toEqual({
          id: rule.id,
          name: input.name,
          match: input.match,
          client: { by: 'ip' },
          limit: { capacity: 50, refill: 1, period: '1m' },
          cost: 1,
          maxDebt: 50,
          enabled: true,
          shadow: false,
          priority: 0,
          version: 2,
          createdAt: rule.createdAt,
          updatedAt: expect.any(String),
        });
        expect(Date.parse(updated.updatedAt)).toBeGreaterThanOrEqual(Date.parse(rule.createdAt));
        expect((await get(`/rules/${rule.id}`)).json()).toEqual(updated);
      });

      it('honours If-Match: 412 on a stale version, 200 on the current one (also W/ and *)', async () => {
        const rule = await createRule(app);
        const put = (ifMatch: string) =>
          app.inject({
            method: 'PUT',
            url: `/rules/${rule.id}`,
            headers: { ...admin, 'if-match': ifMatch },
            payload: { ...ruleInput({ name: rule.name }), priority: 7 },
          });
        expect((await put('"1"')).statusCode).toBe(200);
        const stale = await put('"1"');
        expect(expectError(stale, 412).message).toContain('version 2');
        expect((await get(`/rules/${rule.id}`)).json().version).toBe(2);
        expect((await put('W/"2"')).statusCode).toBe(200);
        expect((await put('"7", "3"')).statusCode).toBe(200);
        expect((await put('*')).statusCode).toBe(200);
        expectError(await put('"abc"'), 412);
        expect((await get(`/rules/${rule.id}`)).json().version).toBe(5);
      });

      it('answers 404 for an unknown id, with or without If-Match', async () => {
        for (const headers of [admin, { ...admin, 'if-match': '"1"' }]) {
          const res = await app.inject({
            method: 'PUT',
            url: `/rules/${UNKNOWN_ID}`,
            headers,
            payload: ruleInput(),
          });
          expectError(res, 404);
        }
        expectError(
          await app.inject({ method: 'PUT', url: '/rules/nope', headers: admin, payload: ruleInput() }),
          404,
        );
      });

      it('answers 409 when renaming onto a taken name and leaves the rule as it was', async () => {
        const a = await createRule(app);
        const b = await createRule(app);
        const res = await app.inject({
          method: 'PUT',
          url: `/rules/${b.id}`,
          headers: admin,
          payload: ruleInput({ name: a.name }),
        });
        expectError(res, 409);
        expect((await get(`/rules/${b.id}`)).json()).toEqual(b);
      });

      it('lets a rule keep its own name', async () => {
        const rule = await createRule(app);
        const res = await app.inject({
          method: 'PUT',
          url: `/rules/${rule.id}`,
          headers: admin,
          payload: ruleInput({ name: rule.name, priority: 4 }),
        });
        expect(res.statusCode).toBe(200);
        expect(res.json().priority).toBe(4);
      });

      it('refuses the read token (403)', async () => {
        const rule = await createRule(app);
        const res = await app.inject({
          method: 'PUT',
          url: `/rules/${rule.id}`,
          headers: reader,
          payload: ruleInput({ name: rule.name }),
        });
        expectError(res, 403);
        expect((await get(`/rules/${rule.id}`)).json().version).toBe(1);
      });
    });

    describe('DELETE /rules/{id}', () => {
      it('deletes (204), then the rule is 404 and a second delete is 404', async () => {
        const rule = await createRule(app);
        const res = await app.inject({ method: 'DELETE', url: `/rules/${rule.id}`, headers: admin });
        expect(res.statusCode).toBe(204);
        expect(res.body).toBe('');
        expectError(await get(`/rules/${rule.id}`), 404);
        expectError(await app.inject({ method: 'DELETE', url: `/rules/${rule.id}`, headers: admin }), 404);
      });

      it('honours If-Match: 412 on a stale version keeps the rule', async () => {
        const rule = await createRule(app);
        const stale = await app.inject({
          method: 'DELETE',
          url: `/rules/${rule.id}`,
          headers: { ...admin, 'if-match': '"2"' },
        });
        expectError(stale, 412);
        expect((await get(`/rules/${rule.id}`)).statusCode).toBe(200);
        const ok = await app.inject({
          method: 'DELETE',
          url: `/rules/${rule.id}`,
          headers: { ...admin, 'if-match': '"1"' },
        });
        expect(ok.statusCode).toBe(204);
      });

      it('accepts an empty body sent as application/json; refuses the read token', async () => {
        const rule = await createRule(app);
        expectError(await app.inject({ method: 'DELETE', url: `/rules/${rule.id}`, headers: reader }), 403);
        const res = await app.inject({
          method: 'DELETE',
          url: `/rules/${rule.id}`,
          headers: { ...admin, 'content-type': 'application/json' },
        });
        expect(res.statusCode).toBe(204);
      });

      it('answers 404 for an unknown id', async () => {
        expectError(await app.inject({ method: 'DELETE', url: `/rules/${UNKNOWN_ID}`, headers: admin }), 404);
      });
    });

    describe('GET /rules/snapshot', () => {
      it('has every rule (enabled and disabled) by name, the version as ETag, 304 when unchanged', async () => {
        await createRule(app, ruleInput({ enabled: false }));
        const res = await get('/rules/snapshot', reader);
        expect(res.statusCode).toBe(200);
        expect(res.headers['content-type']).toMatch(/^application\/json/);
        const snap = res.json();
        expect(Number.isInteger(snap.version)).toBe(true);
        expect(res.headers.etag).toBe(`"${snap.version}"`);
        const names = (snap.rules as Rule[]).map((r) => r.name);
        expect(names).toEqual([...names].sort());
        expect((snap.rules as Rule[]).some((r) => !r.enabled)).toBe(true);
        const listed = (await get('/rules?limit=1000')).json().items;
        expect(snap.rules).toEqual(listed);

        for (const tag of [`"${snap.version}"`, `W/"${snap.version}"`, `"0", "${snap.version}"`, '*']) {
          const unchanged = await get('/rules/snapshot', { ...reader, 'if-none-match': tag });
          expect(unchanged.statusCode, tag).toBe(304);
          expect(unchanged.body).toBe('');
          expect(unchanged.headers.etag).toBe(`"${snap.version}"`);
        }
        const other = await get('/rules/snapshot', { ...reader, 'if-none-match': `"${snap.version - 1}"` });
        expect(other.statusCode).toBe(200);
        expect(other.json()).toEqual(snap);
      });

      it('raises the version with every committed change and never for a refused one', async () => {
        const v0 = await snapshotVersion();
        const rule = await createRule(app);
        expect(await snapshotVersion()).toBe(v0 + 1);
        await app.inject({ method: 'PUT', url: `/rules/${rule.id}`, headers: admin, payload: ruleInput() });
        expect(await snapshotVersion()).toBe(v0 + 2);
        const stale = await app.inject({
          method: 'PUT',
          url: `/rules/${rule.id}`,
          headers: { ...admin, 'if-match': '"1"' },
          payload: ruleInput(),
        });
        expect(stale.statusCode).toBe(412);
        await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: { name: 'Bad' } });
        expect(await snapshotVersion()).toBe(v0 + 2);
        await app.inject({ method: 'DELETE', url: `/rules/${rule.id}`, headers: admin });
        const after = await get('/rules/snapshot', { ...admin, 'if-none-match': `"${v0 + 2}"` });
        expect(after.statusCode).toBe(200);
        expect(after.json().version).toBe(v0 + 3);
        expect((after.json().rules as Rule[]).some((r) => r.id === rule.id)).toBe(false);
      });

      it('is gzip-compressed for clients that accept it, same ETag, Vary: accept-encoding', async () => {
        await createRule(app);
        const plain = await get('/rules/snapshot', reader);
        const zipped = await get('/rules/snapshot', { ...reader, 'accept-encoding': 'br, gzip' });
        expect(zipped.headers['content-encoding']).toBe('gzip');
        expect(zipped.headers.vary).toMatch(/accept-encoding/i);
        expect(zipped.headers.etag).toBe(plain.headers.etag);
        expect(JSON.parse(gunzipSync(zipped.rawPayload).toString('utf8'))).toEqual(plain.json());
        expect(zipped.rawPayload.length).toBeLessThan(plain.rawPayload.length);
        for (const refused of ['gzip;q=0', 'identity', 'br']) {
          const res = await get('/rules/snapshot', { ...reader, 'accept-encoding': refused });
          expect(res.headers['content-encoding'], refused).toBeUndefined();
          expect(res.json(), refused).toEqual(plain.json());
        }
      });

      it('needs a token', async () => {
        expectError(await get('/rules/snapshot', {}), 401);
      });
    });

    describe('GET /rules/{id}/history', () => {
      it('lists the changes newest first with actor, and survives the delete', async () => {
        const rule = await createRule(app);
        const updated = (
          await app.inject({
            method: 'PUT',
            url: `/rules/${rule.id}`,
            headers: admin,
            payload: ruleInput({ name: rule.name, priority: 9 }),
          })
        ).json();
        await app.inject({ method: 'DELETE', url: `/rules/${rule.id}`, headers: admin });
        const res = await get(`/rules/${rule.id}/history`, reader);
        expect(res.statusCode).toBe(200);
        const { items } = res.json();
        expect(items.map((i: { action: string }) => i.action)).toEqual(['delete', 'update', 'create']);
        expect(items.map((i: { version: number }) => i.version)).toEqual([3, 2, 1]);
        expect(items.every((i: { actor: string }) => i.actor === 'admin')).toBe(true);
        expect(items[2].rule).toEqual(rule);
        expect(items[1].rule).toEqual(updated);
        expect(items[0].rule).toEqual(updated);
        for (const item of items) expect(new Date(item.at).toISOString()).toBe(item.at);
        expect(Date.parse(items[0].at)).toBeGreaterThanOrEqual(Date.parse(items[2].at));
        expect(res.body).not.toContain(ADMIN_TOKEN);
        expect(res.body).not.toContain(READ_TOKEN);
      });

      it('pages with limit and cursor', async () => {
        const rule = await createRule(app);
        for (let i = 0; i < 3; i++) {
          await app.inject({
            method: 'PUT',
            url: `/rules/${rule.id}`,
            headers: admin,
            payload: ruleInput({ name: rule.name }),
          });
        }
        const versions: number[] = [];
        let url = `/rules/${rule.id}/history?limit=3`;
        for (;;) {
          const page = (await get(url)).json();
          versions.push(...page.items.map((i: { version: number }) => i.version));
          if (page.nextCursor === null) break;
          url = `/rules/${rule.id}/history?limit=3&cursor=${page.nextCursor}`;
        }
        expect(versions).toEqual([4, 3, 2, 1]);
        expectError(await get(`/rules/${rule.id}/history?cursor=zzz`), 400);
      });

      it('answers 404 for an id that never existed', async () => {
        expectError(await get(`/rules/${UNKNOWN_ID}/history`), 404);
        expectError(await get('/rules/abc/history'), 404);
      });
    });

    describe('operations', () => {
      it('serves /healthz, /readyz, /openapi.json and /docs without a token', async () => {
        expect((await get('/healthz', {})).json()).toEqual({ status: 'ok' });
        expect((await get('/readyz', {})).json()).toEqual({ status: 'ok' });
        const openapi = await get('/openapi.json', {});
        expect(openapi.statusCode).toBe(200);
        const doc = openapi.json();
        expect(doc.openapi).toMatch(/^3\./);
        expect(Object.keys(doc.paths)).toEqual(
          expect.arrayContaining([
            '/rules',
            '/rules/{id}',
            '/rules/snapshot',
            '/rules/{id}/history',
            '/readyz',
          ]),
        );
        expect(Object.keys(doc.paths['/rules/{id}'])).toEqual(
          expect.arrayContaining(['get', 'put', 'delete']),
        );
        expect(doc.paths['/rules/{id}'].put.responses).toHaveProperty('412');
        expect(doc.components.schemas).toHaveProperty('Rule');
        // the repository's own docs, not a contract that is not in it
        expect(openapi.body).not.toMatch(/SPEC/);
        expect(doc.info.description).toContain('docs/rules.md');
        expect(doc.info.description).toContain('docs/rules-api.md');
        const docs = await get('/docs', {});
        expect(docs.statusCode).toBe(200);
        expect(docs.headers['content-type']).toMatch(/text\/html/);
      });

      it('answers unknown routes 404 in the error shape, and echoes request ids', async () => {
        const res = await get('/nope', {});
        expectError(res, 404);
        expect(res.headers['x-request-id']).toMatch(UUID);
        const given = await get('/healthz', { 'x-request-id': 'trace-123' });
        expect(given.headers['x-request-id']).toBe('trace-123');
      });

      it('with AUTH_DISABLED=true, writes need no token and history says anonymous', async () => {
        // Same database, second app (a PGlite directory must not be opened twice).
        const open = await startApp(
          backend,
          { AUTH_DISABLED: 'true', ADMIN_TOKEN: '', READ_TOKEN: '' },
          { database: app.database, skipMigrations: true },
        );
        try {
          const res = await open.inject({ method: 'POST', url: '/rules', payload: ruleInput() });
          expect(res.statusCode).toBe(201);
          const history = (
            await open.inject({ method: 'GET', url: `/rules/${res.json().id}/history` })
          ).json();
          expect(history.items[0].actor).toBe('anonymous');
        } finally {
          await open.close();
        }
      });
    });
  });
}
