/**
 * Rule format v2 end to end: a real rules API (its own Postgres database), the real Redis, a real
 * upstream and gateways built in-process, each asserting what a client sees: stacked limits and their
 * headers, all or nothing, Retry-After across denying limits, sliding windows, conditions, exemptions,
 * precedence, the denial cache with several limits, and v1 rules answering as before.
 *
 * Every rule has a path of its own, so tests do not share counters. The gateways use
 * STORE_FAILURE=closed with a generous STORE_TIMEOUT_MS: on a busy machine a slow Redis then shows up
 * as a 503, never as a silent decision by an in-process fallback.
 */
import { type LimitCheck, partitionKey, SecretClientKeys, type Store } from '@sluice/shared';
import { RedisStore } from '@sluice/shared/redis';
import { sleep } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { type HttpOptions, http } from './helpers/http.js';
import {
  READ_TOKEN,
  type RuleBody,
  type RuleBodyV2,
  type RulesApi,
  startRulesApi,
} from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const HOUR_MS = 3_600_000;
const byKey = { by: 'header' as const, name: 'x-api-key' };

let api: RulesApi;
let upstream: Upstream;
/** trusts no proxy; its store counts the calls that reach Redis */
let gw: RunningGateway;
/** the same, with the denial cache off: every denial is decided by Redis */
let uncached: RunningGateway;
/** TRUST_PROXY = the test client's address (127.0.0.1) */
let trusting: RunningGateway;
let storeCalls = 0;

/** A RedisStore that counts the calls the gateway makes to it. */
function countingStore(keyPrefix: string): Store & { ready(ms: number): Promise<void> } {
  const inner = new RedisStore(REDIS_URL, { keyPrefix, commandTimeoutMs: 2_000 });
  return {
    kind: 'redis',
    acquire: (checks: readonly LimitCheck[]) => {
      storeCalls++;
      return inner.acquire(checks);
    },
    settle: (settlements) => inner.settle(settlements),
    close: () => inner.close(),
    ready: (ms: number) => inner.ready(ms),
  };
}

const rules: (RuleBody | RuleBodyV2)[] = [
  {
    name: 'stacked',
    match: { path: '/stacked/**' },
    limits: [
      { name: 'burst', client: byKey, capacity: 3, refill: 1, period: '1s' },
      { name: 'daily', client: byKey, algorithm: 'sliding-window', max: 100, window: '1d' },
      // one token an hour: its `r` moves only when it is charged
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
    ],
  },
  {
    // the same shape, for the gateway without a denial cache
    name: 'stacked-nocache',
    match: { path: '/stacked-nocache/**' },
    limits: [
      // slower than `stacked`'s burst, so no token comes back during a run of denials on a busy machine
      { name: 'burst', client: byKey, capacity: 3, refill: 1, period: '3s' },
      { name: 'daily', client: byKey, algorithm: 'sliding-window', max: 100, window: '1d' },
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
    ],
  },
  {
    // two limits deny the second request: `short` (first, 10 s) and `long` (60 s)
    name: 'two-deny',
    match: { path: '/twodeny/**' },
    limits: [
      { name: 'roomy', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
      { name: 'short', capacity: 1, refill: 1, period: '10s', maxDebt: 0 },
      { name: 'long', capacity: 1, refill: 1, period: '1m', maxDebt: 0 },
    ],
  },
  {
    name: 'window',
    match: { path: '/window/**' },
    limits: [{ name: 'hourly', algorithm: 'sliding-window', max: 3, window: '1h' }],
  },
  {
    name: 'window-half',
    match: { path: '/windowhalf/**' },
    limits: [{ name: 'hourly', algorithm: 'sliding-window', max: 2, window: '1h', cost: 0.75 }],
  },
  {
    name: 'tiered',
    match: { path: '/tiered/**', headers: { 'X-Tier': 'free' } },
    limits: [{ name: 'hourly', capacity: 1, refill: 1, period: '1h' }],
  },
  {
    name: 'in-net',
    match: { path: '/innet/**', clientIps: ['127.0.0.64/30', '203.0.113.64/30'] },
    limits: [{ name: 'hourly', capacity: 100, refill: 100, period: '1h' }],
  },
  {
    name: 'not-in-net',
    match: { path: '/notinnet/**', notClientIps: ['127.0.0.64/30', '203.0.113.64/30'] },
    limits: [{ name: 'hourly', capacity: 100, refill: 100, period: '1h' }],
  },
  // exemptions above a limiting rule
  {
    name: 'exempt-partner',
    priority: 10,
    match: { path: '/exempt/**', headers: { 'x-partner': 'acme' } },
    unlimited: true,
  },
  {
    name: 'exempt-office',
    priority: 10,
    match: { path: '/exempt/**', clientIps: ['127.0.0.80'] },
    unlimited: true,
  },
  {
    name: 'exempt-everyone-else',
    match: { path: '/exempt/**' },
    limits: [{ name: 'hourly', capacity: 1, refill: 1, period: '1h' }],
  },
  // precedence at equal priority and path: more conditions first, whatever the names
  {
    name: 'prec-a-plain',
    match: { path: '/prec/**' },
    limits: [{ name: 'l', capacity: 5, refill: 5, period: '1h' }],
  },
  {
    name: 'prec-b-one',
    match: { path: '/prec/**', headers: { 'x-tier': 'gold' } },
    limits: [{ name: 'l', capacity: 6, refill: 6, period: '1h' }],
  },
  {
    name: 'prec-c-two',
    match: { path: '/prec/**', methods: ['GET'], headers: { 'x-tier': 'gold' } },
    limits: [{ name: 'l', capacity: 7, refill: 7, period: '1h' }],
  },
  {
    name: 'cached',
    match: { path: '/cached/**' },
    limits: [
      { name: 'burst', client: byKey, capacity: 1, refill: 1, period: '2s', maxDebt: 0 },
      { name: 'daily', client: byKey, algorithm: 'sliding-window', max: 100, window: '1d' },
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
    ],
  },
  { name: 'classic', match: { path: '/classic/**' }, limit: { capacity: 2, refill: 1, period: '1h' } },
];

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  for (const rule of rules) await api.createRule(rule);
  const env = {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    STORE_FAILURE: 'closed',
    STORE_TIMEOUT_MS: '2000',
  };
  const prefix = uniqueKeyPrefix('rules-v2');
  const store = countingStore(prefix);
  await store.ready(5_000);
  [gw, uncached, trusting] = await Promise.all([
    startGateway({ ...env, REDIS_KEY_PREFIX: prefix }, { store }),
    startGateway({ ...env, REDIS_KEY_PREFIX: uniqueKeyPrefix('rules-v2-nocache'), DENIAL_CACHE_SIZE: '0' }),
    startGateway({
      ...env,
      REDIS_KEY_PREFIX: uniqueKeyPrefix('rules-v2-trusting'),
      TRUST_PROXY: '127.0.0.1',
    }),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([gw?.close(), uncached?.close(), trusting?.close()]);
  await Promise.all([api?.close(), upstream?.close()]);
});

const get = (port: number, path: string, options: HttpOptions = {}) => http(port, path, options);
const withKey = (key: string): HttpOptions => ({ headers: { 'x-api-key': key } });
/** draft-11's `;pk=` of a client key, as a per-client RateLimit item ends */
const pk = (clientKey: string) => `;pk=${partitionKey(clientKey)}`;
const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** `r` of item `name` in a RateLimit header. */
function remaining(header: string | string[] | undefined, name: string): number {
  const match = new RegExp(`"${name.replace('.', '\\.')}";r=(\\d+);t=(\\d+)`).exec(String(header));
  if (!match) throw new Error(`no item "${name}" in RateLimit: ${String(header)}`);
  return Number(match[1]);
}

/** Waits until the current aligned window of `windowMs` has at least `marginMs` left. */
async function awayFromWindowEdge(windowMs: number, marginMs: number): Promise<void> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < marginMs) await sleep(left + 100);
}

describe('a stacked rule (burst and daily per key, one global)', () => {
  it('lists one item per limit, named "<rule>.<limit>", in the rule’s order', async () => {
    await awayFromWindowEdge(24 * HOUR_MS, 10_000);
    const first = await get(gw.port, '/stacked/a', withKey('alpha'));
    expect(first.status).toBe(200);
    expect(first.headers['ratelimit-policy']).toBe(
      '"stacked.burst";q=3;w=3, "stacked.daily";q=100;w=86400, "stacked.everyone";q=1000;w=3600000',
    );
    const rateLimit = String(first.headers.ratelimit);
    // x-api-key is a credential: its client key is the value's hash
    const alpha = escaped(pk(new SecretClientKeys(undefined).clientKey('alpha')!));
    const match = new RegExp(
      `^"stacked\\.burst";r=2;t=1${alpha}, "stacked\\.daily";r=99;t=(\\d+)${alpha}, "stacked\\.everyone";r=999;t=3600$`,
    ).exec(rateLimit);
    expect(match, rateLimit).not.toBeNull();
    // one more unit needs the daily estimate back to 0: at the end of tomorrow's (UTC) window
    const dayMs = 24 * HOUR_MS;
    const untilZeroMs = 2 * dayMs - (Date.now() % dayMs);
    expect(Math.abs(Number(match![1]) - untilZeroMs / 1000)).toBeLessThanOrEqual(2);
  });

  it('the burst runs out → 429 naming "burst", Retry-After of the burst; nothing else is charged', async () => {
    const second = await get(gw.port, '/stacked/a', withKey('alpha'));
    const third = await get(gw.port, '/stacked/a', withKey('alpha'));
    expect([second.status, third.status]).toEqual([200, 200]);
    expect(remaining(third.headers.ratelimit, 'stacked.burst')).toBe(0);
    expect(remaining(third.headers.ratelimit, 'stacked.daily')).toBe(97);
    expect(remaining(third.headers.ratelimit, 'stacked.everyone')).toBe(997);

    const denied = await get(gw.port, '/stacked/a', withKey('alpha'));
    expect(denied.status).toBe(429);
    expect(denied.headers['retry-after']).toBe('1');
    expect(denied.json()).toEqual({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      title: 'Request cannot be satisfied as assigned quota has been exceeded',
      status: 429,
      detail: expect.any(String),
      'violated-policies': ['stacked.burst'],
      code: 'SLUICE_RATE_LIMITED',
      statusCode: 429,
      error: 'Too Many Requests',
      message: expect.any(String),
      rule: 'stacked',
      limit: 'burst',
      retryAfter: 1,
      requestId: denied.headers['x-request-id'],
    });
    // the denial's own headers: every limit as it stands, uncharged
    expect(remaining(denied.headers.ratelimit, 'stacked.burst')).toBe(0);
    expect(remaining(denied.headers.ratelimit, 'stacked.daily')).toBe(97);
    expect(remaining(denied.headers.ratelimit, 'stacked.everyone')).toBe(997);
  });
});

describe('all or nothing (every denial decided by Redis: no denial cache)', () => {
  it('a run of denials by one limit uses up none of the others', async () => {
    const port = uncached.port;
    for (let i = 0; i < 3; i++)
      expect((await get(port, '/stacked-nocache/a', withKey('alpha'))).status).toBe(200);
    const denials = [];
    for (let i = 0; i < 8; i++) denials.push(await get(port, '/stacked-nocache/a', withKey('alpha')));
    expect(denials.map((d) => d.status)).toEqual(Array(8).fill(429));
    for (const d of denials) {
      expect(d.json().limit).toBe('burst');
      expect(remaining(d.headers.ratelimit, 'stacked-nocache.daily')).toBe(97);
      expect(remaining(d.headers.ratelimit, 'stacked-nocache.everyone')).toBe(997);
    }
    // another key shares only the global limit: 997 left before its own request, 996 after
    const other = await get(port, '/stacked-nocache/a', withKey('beta'));
    expect(other.status).toBe(200);
    expect(remaining(other.headers.ratelimit, 'stacked-nocache.everyone')).toBe(996);
    expect(remaining(other.headers.ratelimit, 'stacked-nocache.daily')).toBe(99);
    // once the burst has a token again, the same key's daily count is 3 + this one
    await sleep(Number(denials.at(-1)!.headers['retry-after']) * 1000 + 50);
    const after = await get(port, '/stacked-nocache/a', withKey('alpha'));
    expect(after.status).toBe(200);
    expect(remaining(after.headers.ratelimit, 'stacked-nocache.daily')).toBe(96);
    expect(remaining(after.headers.ratelimit, 'stacked-nocache.everyone')).toBe(995);
  });

  it('Retry-After is the longest wait among the denying limits; the body names the first', async () => {
    const first = await get(uncached.port, '/twodeny/x');
    expect(first.status).toBe(200);
    const denied = await get(uncached.port, '/twodeny/x');
    expect(denied.status).toBe(429);
    expect(denied.headers['retry-after']).toBe('60');
    expect(denied.json()).toMatchObject({ rule: 'two-deny', limit: 'short', retryAfter: 60 });
    // the problem names every policy that refused, as RateLimit-Policy names them
    expect(denied.json()['violated-policies']).toEqual(['two-deny.short', 'two-deny.long']);
    expect(denied.headers.ratelimit).toBe(
      `"two-deny.roomy";r=999;t=3600, "two-deny.short";r=0;t=10${pk('ip:127.0.0.1')}, "two-deny.long";r=0;t=60${pk('ip:127.0.0.1')}`,
    );
  });
});

describe('a sliding-window rule', () => {
  it('admits max in a window, then 429 until the weighted previous window leaves room', async () => {
    await awayFromWindowEdge(HOUR_MS, 10_000);
    const windowStartMs = Date.now() - (Date.now() % HOUR_MS);
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await get(gw.port, '/window/x'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers[0]!.headers['ratelimit-policy']).toBe('"window.hourly";q=3;w=3600');
    expect(answers.map((a) => remaining(a.headers.ratelimit, 'window.hourly'))).toEqual([2, 1, 0]);

    const sentMs = Date.now();
    const denied = await get(gw.port, '/window/x');
    const receivedMs = Date.now();
    expect(denied.status).toBe(429);
    expect(denied.json()).toMatchObject({ rule: 'window', limit: 'hourly' });
    // no further traffic: this window keeps 3; in the next, 3·(1 − elapsed/1h) ≤ 2 once a third of it
    // has passed. So the wait is the rest of this window plus 20 minutes.
    const admitAtMs = windowStartMs + HOUR_MS + HOUR_MS / 3;
    const retryAfter = Number(denied.headers['retry-after']);
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((admitAtMs - receivedMs) / 1000) - 1);
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((admitAtMs - sentMs) / 1000) + 1);
    expect(denied.json().retryAfter).toBe(retryAfter);
    // t (draft-11): until one more unit is available, which is the wait of this cost-1 request
    expect(denied.headers.ratelimit).toBe(`"window.hourly";r=0;t=${retryAfter}${pk('ip:127.0.0.1')}`);
  });

  it('r is max − estimate, floored (cost 0.75, max 2)', async () => {
    await awayFromWindowEdge(HOUR_MS, 10_000);
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await get(gw.port, '/windowhalf/x'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    // estimates 0.75, 1.5 → r = floor(1.25), floor(0.5); the denied third (1.5 + 0.75 > 2) leaves 1.5
    expect(answers.map((a) => remaining(a.headers.ratelimit, 'window-half.hourly'))).toEqual([1, 0, 0]);
  });
});

describe('conditions', () => {
  const policyOf = async (port: number, path: string, options: HttpOptions) =>
    (await get(port, path, options)).headers['ratelimit-policy'];

  it('match.headers: exact value, any name case; a missing or repeated header does not match', async () => {
    const free = await get(gw.port, '/tiered/x', { headers: { 'x-tier': 'free' } });
    expect(free.status).toBe(200);
    expect(free.headers['ratelimit-policy']).toBe('"tiered.hourly";q=1;w=3600');
    expect((await get(gw.port, '/tiered/x', { headers: { 'X-TIER': 'free' } })).status).toBe(429);
    for (const options of [
      {},
      { headers: { 'x-tier': 'FREE' } },
      { headers: { 'x-tier': ['free', 'free'] } },
      { headers: { 'x-tier': ['free', 'paid'] } },
    ]) {
      const answer = await get(gw.port, '/tiered/x', options);
      expect(answer.status, JSON.stringify(options)).toBe(200);
      expect(answer.headers['ratelimit-policy'], JSON.stringify(options)).toBeUndefined();
    }
  });

  it('clientIps / notClientIps without a trusted proxy: the socket peer decides, X-Forwarded-For never', async () => {
    const from = (localAddress: string, forwardedFor: string): HttpOptions => ({
      localAddress,
      headers: { 'x-forwarded-for': forwardedFor },
    });
    // the peer is in the net; the forwarded address claims to be out of it
    expect(await policyOf(gw.port, '/innet/x', from('127.0.0.65', '198.51.100.1'))).toBe(
      '"in-net.hourly";q=100;w=3600',
    );
    expect(await policyOf(gw.port, '/notinnet/x', from('127.0.0.65', '198.51.100.1'))).toBeUndefined();
    // the peer is out of the net; the forwarded address claims to be in it
    expect(await policyOf(gw.port, '/innet/x', from('127.0.0.10', '203.0.113.65'))).toBeUndefined();
    expect(await policyOf(gw.port, '/innet/x', from('127.0.0.10', '127.0.0.65'))).toBeUndefined();
    expect(await policyOf(gw.port, '/notinnet/x', from('127.0.0.10', '127.0.0.65'))).toBe(
      '"not-in-net.hourly";q=100;w=3600',
    );
  });

  it('clientIps / notClientIps with TRUST_PROXY = the client: the forwarded IP decides', async () => {
    const via = (forwardedFor: string, localAddress = '127.0.0.1'): HttpOptions => ({
      localAddress,
      headers: { 'x-forwarded-for': forwardedFor },
    });
    expect(await policyOf(trusting.port, '/innet/x', via('203.0.113.65'))).toBe(
      '"in-net.hourly";q=100;w=3600',
    );
    expect(await policyOf(trusting.port, '/notinnet/x', via('203.0.113.65'))).toBeUndefined();
    expect(await policyOf(trusting.port, '/innet/x', via('198.51.100.1'))).toBeUndefined();
    expect(await policyOf(trusting.port, '/notinnet/x', via('198.51.100.1'))).toBe(
      '"not-in-net.hourly";q=100;w=3600',
    );
    // the proxy's own address (127.0.0.1) is not in the net: without a forwarded address it decides
    expect(await policyOf(trusting.port, '/innet/x', { localAddress: '127.0.0.1' })).toBeUndefined();
    // a peer the gateway does not trust cannot move itself into the net
    expect(await policyOf(trusting.port, '/innet/x', via('203.0.113.65', '127.0.0.10'))).toBeUndefined();
    expect(await policyOf(trusting.port, '/notinnet/x', via('203.0.113.65', '127.0.0.10'))).toBe(
      '"not-in-net.hourly";q=100;w=3600',
    );
  });
});

describe('exemptions', () => {
  it('a higher-priority unlimited rule lets its requests through with no RateLimit headers', async () => {
    const hitsBefore = upstream.hits('/exempt');
    for (let i = 0; i < 4; i++) {
      const partner = await get(gw.port, '/exempt/x', {
        localAddress: '127.0.0.81',
        headers: { 'x-partner': 'acme' },
      });
      expect(partner.status).toBe(200);
      expect(partner.headers['ratelimit-policy']).toBeUndefined();
      expect(partner.headers.ratelimit).toBeUndefined();
      const office = await get(gw.port, '/exempt/x', { localAddress: '127.0.0.80' });
      expect(office.status).toBe(200);
      expect(office.headers.ratelimit).toBeUndefined();
    }
    expect(upstream.hits('/exempt')).toBe(hitsBefore + 8);
    // everyone else is still limited by the rule below (the same address without the partner header too)
    const first = await get(gw.port, '/exempt/x', { localAddress: '127.0.0.81' });
    expect(first.status).toBe(200);
    expect(first.headers.ratelimit).toBe(`"exempt-everyone-else.hourly";r=0;t=3600${pk('ip:127.0.0.81')}`);
    const second = await get(gw.port, '/exempt/x', {
      localAddress: '127.0.0.81',
      headers: { 'x-partner': 'other' },
    });
    expect(second.status).toBe(429);
    expect(second.json()).toMatchObject({ rule: 'exempt-everyone-else', limit: 'hourly' });
  });
});

describe('precedence with conditions', () => {
  it('at equal priority and path, the rule with more conditions wins, whatever its name', async () => {
    const policy = async (method: string, headers: Record<string, string>) =>
      (await get(gw.port, '/prec/x', { method, headers })).headers['ratelimit-policy'];
    expect(await policy('GET', { 'x-tier': 'gold' })).toBe('"prec-c-two.l";q=7;w=3600');
    expect(await policy('POST', { 'x-tier': 'gold' })).toBe('"prec-b-one.l";q=6;w=3600');
    expect(await policy('GET', { 'x-tier': 'silver' })).toBe('"prec-a-plain.l";q=5;w=3600');
    expect(await policy('GET', {})).toBe('"prec-a-plain.l";q=5;w=3600');
  });
});

describe('the denial cache with several limits', () => {
  it('a flood after a denial costs no store call; after Retry-After the store decides and admits', async () => {
    const metrics = async () => (await fetch(`${gw.adminUrl}/metrics`)).text();
    expect((await get(gw.port, '/cached/x', withKey('flood'))).status).toBe(200);
    const callsBeforeDenial = storeCalls;
    const denied = await get(gw.port, '/cached/x', withKey('flood'));
    expect(denied.status).toBe(429);
    expect(denied.json().limit).toBe('burst');
    expect(storeCalls).toBe(callsBeforeDenial + 1);
    const deniedAtMs = Date.now();

    const cachedBefore = metricValue(await metrics(), 'sluice_denials_cached_total');
    const callsBefore = storeCalls;
    const flood = await Promise.all(
      Array.from({ length: 20 }, () => get(gw.port, '/cached/x', withKey('flood'))),
    );
    expect(flood.map((a) => a.status)).toEqual(Array(20).fill(429));
    expect(storeCalls).toBe(callsBefore);
    expect(metricValue(await metrics(), 'sluice_denials_cached_total')).toBe(cachedBefore + 20);
    for (const answer of flood) {
      expect(answer.json()).toMatchObject({ rule: 'cached', limit: 'burst' });
      expect(remaining(answer.headers.ratelimit, 'cached.daily')).toBe(99);
      expect(remaining(answer.headers.ratelimit, 'cached.everyone')).toBe(999);
      expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(Number(answer.headers['retry-after'])).toBeLessThanOrEqual(2);
    }

    await sleep(Math.max(0, deniedAtMs + Number(denied.headers['retry-after']) * 1000 + 50 - Date.now()));
    const callsBeforeRetry = storeCalls;
    const retried = await get(gw.port, '/cached/x', withKey('flood'));
    expect(retried.status).toBe(200);
    expect(storeCalls).toBe(callsBeforeRetry + 1);
    expect(remaining(retried.headers.ratelimit, 'cached.daily')).toBe(98);
  });
});

describe('a v1 rule', () => {
  it('answers exactly as before: one item named after the rule, 429 body without "limit"', async () => {
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await get(gw.port, '/classic/x'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    expect(answers.map((a) => a.headers['ratelimit-policy'])).toEqual(Array(3).fill('"classic";q=2;w=7200'));
    // t (draft-11): until one more token, an hour, never the two hours until full
    expect(answers[0]!.headers.ratelimit).toBe(`"classic";r=1;t=3600${pk('ip:127.0.0.1')}`);
    expect(answers[1]!.headers.ratelimit).toBe(`"classic";r=0;t=3600${pk('ip:127.0.0.1')}`);
    expect(answers[2]!.headers.ratelimit).toBe(`"classic";r=0;t=3600${pk('ip:127.0.0.1')}`);
    expect(answers[2]!.headers['retry-after']).toBe('3600');
    expect(answers[2]!.json()).toEqual({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      title: 'Request cannot be satisfied as assigned quota has been exceeded',
      status: 429,
      detail: 'rate limit of rule "classic" exceeded',
      'violated-policies': ['classic'],
      code: 'SLUICE_RATE_LIMITED',
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'rate limit of rule "classic" exceeded',
      rule: 'classic',
      retryAfter: 3600,
      requestId: answers[2]!.headers['x-request-id'],
    });
  });
});
