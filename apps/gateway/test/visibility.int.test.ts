import { waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { type RedisProcess, startRedisServer } from './helpers/redis.js';
import {
  ADMIN_TOKEN,
  READ_TOKEN,
  type RuleBody,
  type RuleBodyV2,
  type RulesApi,
  type StoredRule,
  startRulesApi,
} from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

// shown in clear on purpose (`secret: false`): these tests read offenders and usage by their values;
// that a credential is shown only by its digest is no-credential-in-clear.int.test.ts's (rules API)
const byKey = { by: 'header' as const, name: 'x-api-key', secret: false };

const RULES: (RuleBody | RuleBodyV2)[] = [
  {
    name: 'stacked',
    match: { path: '/stacked/**' },
    limits: [
      // one token an hour: nothing comes back during a test, so every count below is exact
      { name: 'burst', client: byKey, capacity: 3, refill: 1, period: '1h' },
      { name: 'daily', client: byKey, algorithm: 'sliding-window', max: 100, window: '1d' },
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
    ],
  },
  {
    name: 'beta-shadow',
    shadow: true,
    match: { path: '/beta/**' },
    client: { by: 'ip' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  },
  {
    name: 'flood',
    match: { path: '/flood/**' },
    client: { by: 'ip' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  },
  {
    name: 'slots',
    match: { path: '/slow/**' },
    limits: [
      { name: 'inflight', client: byKey, algorithm: 'concurrency', max: 3 },
      { name: 'rate', client: byKey, capacity: 100, refill: 1, period: '1h' },
    ],
  },
  {
    name: 'debt',
    match: { path: '/debt/**' },
    client: { by: 'ip' },
    limit: { capacity: 10, refill: 1, period: '1s' },
    cost: 8,
    maxDebt: 10,
  },
];

let redis: RedisProcess;
let admin: Redis;
let api: RulesApi;
let upstream: Upstream;
let a: RunningGateway;
let b: RunningGateway;
const ids = new Map<string, string>();

beforeAll(async () => {
  redis = await startRedisServer();
  admin = new Redis(redis.url);
  const prefix = uniqueKeyPrefix('visibility');
  [api, upstream] = await Promise.all([
    startRulesApi({ env: { REDIS_URL: redis.url, REDIS_KEY_PREFIX: prefix } }),
    startUpstream(),
  ]);
  for (const rule of RULES) {
    const stored: StoredRule = await api.createRule(rule);
    ids.set(rule.name, stored.id);
  }
  const env = {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: prefix,
    STORE_FAILURE: 'closed',
    STORE_TIMEOUT_MS: '2000',
  };
  // no timed flush: the tests flush when they want the rules API to see the counts
  [a, b] = await Promise.all([
    // no timed flush, no heartbeat: the flood test counts every command Redis runs
    startGateway(env, { offendersFlushMs: 0, heartbeatMs: 0 }),
    startGateway(env, { offendersFlushMs: 0, heartbeatMs: 0 }),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await Promise.all([api?.close(), upstream?.close()]);
  admin?.disconnect();
  await redis?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: JSON answers, read field by field
type Json = Record<string, any>;

const adminGet = async (gw: RunningGateway, path: string) => {
  const response = await fetch(`${gw.adminUrl}${path}`);
  return { status: response.status, body: (await response.json()) as Json };
};
const rulesApiOffenders = async (rule: string, query = '', token = READ_TOKEN) => {
  const response = await fetch(`${api.url}/rules/${ids.get(rule)}/offenders${query}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return { status: response.status, body: (await response.json()) as Json };
};
const send = (gw: RunningGateway, path: string, headers: Record<string, string> = {}) =>
  http(gw.port, path, { headers });

/** Every command Redis has run so far, by name (INFO commandstats). */
async function commandCalls(): Promise<Map<string, number>> {
  const info = await admin.info('commandstats');
  const calls = new Map<string, number>();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
  return calls;
}

describe('top offenders', () => {
  it('each gateway counts what it denied; the rules API sums both gateways through Redis', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 7; i++) statuses.push((await send(a, '/stacked/x', { 'x-api-key': 'alice' })).status);
    // three admitted, then denied by the burst (partly from the denial cache)
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429]);
    for (let i = 0; i < 2; i++)
      expect((await send(b, '/stacked/x', { 'x-api-key': 'alice' })).status).toBe(429);
    for (let i = 0; i < 4; i++) await send(a, '/stacked/x', { 'x-api-key': 'bob' });

    const onA = await adminGet(a, '/offenders?rule=stacked');
    expect(onA).toEqual({
      status: 200,
      body: {
        rule: 'stacked',
        minutes: 15,
        items: [
          { client: 'header:alice', limit: 'burst', denied: 4, shadow: false },
          { client: 'header:bob', limit: 'burst', denied: 1, shadow: false },
        ],
      },
    });
    expect((await adminGet(b, '/offenders?rule=stacked&minutes=1')).body.items).toEqual([
      { client: 'header:alice', limit: 'burst', denied: 2, shadow: false },
    ]);

    // nothing reaches Redis before a flush
    expect((await rulesApiOffenders('stacked')).body.items).toEqual([]);
    await Promise.all([a.gateway.offenders.flush(), b.gateway.offenders.flush()]);
    const merged = await rulesApiOffenders('stacked', '?minutes=60');
    expect(merged).toEqual({
      status: 200,
      body: {
        rule: ids.get('stacked'),
        minutes: 60,
        items: [
          { client: 'header:alice', limit: 'burst', denied: 6, shadow: false },
          { client: 'header:bob', limit: 'burst', denied: 1, shadow: false },
        ],
      },
    });
    // a flush sends only what is new: flushing again adds nothing
    await a.gateway.offenders.flush();
    expect((await rulesApiOffenders('stacked')).body.items[0].denied).toBe(6);
  });

  it('flags a shadow rule’s would-be denials shadow: true (the requests pass)', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await send(a, '/beta/x')).status);
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect((await adminGet(a, '/offenders?rule=beta-shadow')).body.items).toEqual([
      { client: 'ip:127.0.0.1', limit: '', denied: 3, shadow: true },
    ]);
    await a.gateway.offenders.flush();
    expect((await rulesApiOffenders('beta-shadow')).body.items).toEqual([
      { client: 'ip:127.0.0.1', limit: '', denied: 3, shadow: true },
    ]);
  });

  it('a flood answered from the denial cache makes no Redis call; its counts leave in one flush', async () => {
    expect((await send(a, '/flood/x')).status).toBe(200);
    // denials are counted per wall-clock minute: a flood that crosses a minute fills two
    const firstMinute = Math.floor(Date.now() / 60_000);
    expect((await send(a, '/flood/x')).status).toBe(429); // decided by Redis, then remembered
    const before = await commandCalls();
    for (let i = 0; i < 200; i++) expect((await send(a, '/flood/x')).status).toBe(429);
    const minutes = Math.floor(Date.now() / 60_000) - firstMinute + 1;
    const after = await commandCalls();
    // the only commands in between are the INFO of `commandCalls` itself
    const changed = [...after].filter(
      ([name, calls]) => name !== 'info' && calls !== (before.get(name) ?? 0),
    );
    expect(changed).toEqual([]);
    expect(after.get('info')).toBe((before.get('info') ?? 0) + 1);

    await a.gateway.offenders.flush();
    const flushed = await commandCalls();
    // one ZINCRBY for the one offender (201 denials) and one EXPIRE, per minute's key
    expect((flushed.get('zincrby') ?? 0) - (after.get('zincrby') ?? 0)).toBe(minutes);
    expect((flushed.get('expire') ?? 0) - (after.get('expire') ?? 0)).toBe(minutes);
    expect((await rulesApiOffenders('flood')).body.items).toEqual([
      { client: 'ip:127.0.0.1', limit: '', denied: 201, shadow: false },
    ]);
  });

  it('answers 400 for minutes out of 1–60 and 404 for an unknown rule, on both', async () => {
    for (const query of ['&minutes=0', '&minutes=61', '&minutes=abc', '&minutes=1.5']) {
      const answer = await adminGet(a, `/offenders?rule=stacked${query}`);
      expect(answer.status).toBe(400);
      expect(answer.body.code).toBe('SLUICE_ADMIN_BAD_QUERY');
    }
    expect((await adminGet(a, '/offenders')).status).toBe(400);
    expect(await adminGet(a, '/offenders?rule=nope')).toMatchObject({
      status: 404,
      body: { code: 'SLUICE_RULE_NOT_FOUND' },
    });
    expect((await rulesApiOffenders('stacked', '?minutes=61')).status).toBe(400);
    expect((await rulesApiOffenders('stacked', '?minutes=0')).status).toBe(400);
    const unknown = await fetch(`${api.url}/rules/00000000-0000-4000-8000-000000000000/offenders`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(unknown.status).toBe(404);
    expect((await fetch(`${api.url}/rules/${ids.get('stacked')}/offenders`)).status).toBe(401);
  });
});

describe('usage', () => {
  it('tells where a client stands, charging nothing, before and after traffic', async () => {
    const usage = (client: string) => adminGet(a, `/usage?rule=stacked&client=${encodeURIComponent(client)}`);
    const fresh = await usage('header:carol');
    expect(fresh.status).toBe(200);
    expect(fresh.body).toMatchObject({
      rule: 'stacked',
      client: 'header:carol', // looked up by the raw value, answered by its hash
      limits: [
        { name: 'burst', algorithm: 'token-bucket', remaining: 3, debt: 0, inFlight: 0, fullInSeconds: 0 },
        {
          name: 'daily',
          algorithm: 'sliding-window',
          remaining: 100,
          debt: 0,
          inFlight: 0,
          fullInSeconds: 0,
        },
        { name: 'everyone', algorithm: 'token-bucket', debt: 0, inFlight: 0 },
      ],
    });
    // asking again changed nothing
    expect((await usage('header:carol')).body.limits[0].remaining).toBe(3);
    const everyoneBefore = fresh.body.limits[2].remaining as number;

    for (let i = 0; i < 2; i++) await send(b, '/stacked/x', { 'x-api-key': 'carol' });
    const after = await usage('header:carol');
    expect(after.body.limits).toMatchObject([
      { name: 'burst', remaining: 1, debt: 0, fullInSeconds: 7200 },
      { name: 'daily', remaining: 98, debt: 0 },
      { name: 'everyone', remaining: everyoneBefore - 2 },
    ]);
    // the limits the response headers showed for the next request
    const next = await send(a, '/stacked/x', { 'x-api-key': 'carol' });
    expect(next.headers.ratelimit).toContain('"stacked.burst";r=0');
  });

  it('reports a token bucket’s debt', async () => {
    expect((await send(a, '/debt/x')).status).toBe(200);
    expect((await send(a, '/debt/x')).status).toBe(200); // 10 − 8 − 8 = −6
    const { body } = await adminGet(a, '/usage?rule=debt&client=ip:127.0.0.1');
    expect(body.limits[0].remaining).toBe(0);
    expect(body.limits[0].debt).toBeGreaterThan(5);
    expect(body.limits[0].debt).toBeLessThanOrEqual(6);
    expect(body.limits[0].fullInSeconds).toBeGreaterThan(14);
  });

  it('counts a concurrency limit’s slots in flight, on whichever gateway holds them', async () => {
    const usage = async () =>
      (await adminGet(a, `/usage?rule=slots&client=${encodeURIComponent('header:dave')}`)).body;
    expect((await usage()).limits[0]).toMatchObject({
      name: 'inflight',
      algorithm: 'concurrency',
      remaining: 3,
      inFlight: 0,
    });
    // two requests held at the upstream through the other gateway
    const held = [
      send(b, '/slow/x?ms=800', { 'x-api-key': 'dave' }),
      send(b, '/slow/x?ms=800', { 'x-api-key': 'dave' }),
    ];
    await waitFor(async () => (await usage()).limits[0].inFlight === 2, 5_000, 'both slots taken');
    expect((await usage()).limits[0]).toMatchObject({ remaining: 1, inFlight: 2, debt: 0, fullInSeconds: 0 });
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200]);
    // each slot came back with the end of its exchange
    await b.settled();
    expect((await usage()).limits).toMatchObject([
      { remaining: 3, inFlight: 0 },
      { name: 'rate', remaining: 98, inFlight: 0 },
    ]);
  });

  it('answers 400 for a malformed client key and 404 for an unknown rule', async () => {
    for (const client of ['', 'alice', 'ip:', 'ip:999.1.1.1', 'ip:2001:db8::1', 'header:', 'global2']) {
      const answer = await adminGet(a, `/usage?rule=stacked&client=${encodeURIComponent(client)}`);
      expect(answer.status, client).toBe(400);
      expect(answer.body.code).toBe('SLUICE_ADMIN_BAD_QUERY');
    }
    for (const client of ['global', 'ip:203.0.113.7', 'ip:2001:db8:1:2::/64', 'header:x']) {
      expect((await adminGet(a, `/usage?rule=stacked&client=${encodeURIComponent(client)}`)).status).toBe(
        200,
      );
    }
    expect((await adminGet(a, '/usage?rule=nope&client=global')).status).toBe(404);
  });
});
