/**
 * Redis failures (STORE_FAILURE, docs/configuration.md), with a redis-server this file starts
 * on its own port and kills, freezes and restarts.
 */
import { Agent } from 'node:http';
import { freePort, sleep, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { type RedisProcess, startRedisServer } from './helpers/redis.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let upstream: Upstream;
let redis: RedisProcess;
let local: RunningGateway;
let open: RunningGateway;
let closed: RunningGateway;
const keyPrefix = uniqueKeyPrefix('store-failure');

const metrics = async (gw: RunningGateway) => (await fetch(`${gw.adminUrl}/metrics`)).text();

beforeAll(async () => {
  [api, upstream, redis] = await Promise.all([startRulesApi(), startUpstream(), startRedisServer()]);
  await api.createRule({
    name: 'roomy',
    match: { path: '/roomy/**' },
    limit: { capacity: 1_000_000, refill: 1, period: '1h' },
  });
  await api.createRule({
    name: 'tight',
    match: { path: '/tight/**' },
    limit: { capacity: 2, refill: 1, period: '1h' },
  });
  const deadPort = await freePort();
  const base = { UPSTREAMS: `/=${upstream.url}`, RULES_API_URL: api.url, RULES_API_TOKEN: READ_TOKEN };
  [local, open, closed] = await Promise.all([
    startGateway(
      { ...base, REDIS_URL: redis.url, REDIS_KEY_PREFIX: keyPrefix, STORE_TIMEOUT_MS: '50' },
      { storeCoolDownMs: 200 },
    ),
    startGateway({ ...base, REDIS_URL: `redis://127.0.0.1:${deadPort}`, STORE_FAILURE: 'open' }),
    startGateway({ ...base, REDIS_URL: `redis://127.0.0.1:${deadPort}`, STORE_FAILURE: 'closed' }),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([local?.close(), open?.close(), closed?.close()]);
  await Promise.all([api?.close(), upstream?.close(), redis?.close()]);
});

describe('STORE_FAILURE=local (default)', () => {
  it('Redis killed under load: zero 5xx, the local bucket decides, then back on Redis when it returns', async () => {
    const statuses = new Map<number, number>();
    const agent = new Agent({ keepAlive: true, maxSockets: 4 });
    const startedAt = performance.now();
    let maxLatencyMs = 0;
    const worker = async () => {
      while (performance.now() - startedAt < 3_000) {
        const sentAt = performance.now();
        const answer = await http(local.port, '/roomy/x', { agent });
        maxLatencyMs = Math.max(maxLatencyMs, performance.now() - sentAt);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      }
    };
    const load = Promise.all([worker(), worker(), worker(), worker()]);
    await sleep(800);
    await redis.kill();
    await sleep(1_000);
    await redis.restart();
    await load;
    agent.destroy();

    expect([...statuses.keys()]).toEqual([200]);
    const text = await metrics(local);
    expect(metricValue(text, 'sluice_store_fallbacks_total', { policy: 'local' })).toBeGreaterThan(0);
    expect(metricValue(text, 'sluice_store_errors_total', { reason: 'error' })).toBeGreaterThan(0);

    // back on Redis by itself: the breaker closes and buckets are written to the new Redis again
    await waitFor(
      async () => {
        await http(local.port, '/roomy/x');
        return metricValue(await metrics(local), 'sluice_store_breaker_state') === 0;
      },
      10_000,
      'the breaker to close',
    );
    const client = new Redis(redis.url);
    try {
      await waitFor(
        // limit keys are `<prefix>{<rule>:<client>}…`; top offenders also live under the prefix
        async () => (await client.keys(`${keyPrefix}{*`)).length > 0,
        5_000,
        'a bucket in the new Redis',
      );
    } finally {
      client.disconnect();
    }
  }, 30_000);

  it('a frozen Redis (no answers): each request is answered by the policy after STORE_TIMEOUT_MS, then the open breaker answers at once', async () => {
    expect((await http(local.port, '/roomy/y')).status).toBe(200);
    redis.signal('SIGSTOP');
    try {
      for (let i = 0; i < 10; i++) expect((await http(local.port, '/roomy/y')).status).toBe(200);
      // the store timed out (not hung), and the breaker opened: later requests never waited on it
      // (how long each waited is measured by the bench, not asserted here)
      const text = await metrics(local);
      expect(metricValue(text, 'sluice_store_errors_total', { reason: 'timeout' })).toBeGreaterThan(0);
      expect(metricValue(text, 'sluice_store_breaker_state')).toBe(1);
      expect(metricValue(text, 'sluice_store_fallbacks_total', { policy: 'local' })).toBeGreaterThanOrEqual(
        10,
      );
    } finally {
      redis.signal('SIGCONT');
    }
  });

  it('the local bucket enforces the same rule while Redis is away', async () => {
    await redis.kill();
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await http(local.port, '/tight/x')).status);
      // the local bucket starts full: capacity 2 admitted, then denied by the same arithmetic
      expect(statuses).toEqual([200, 200, 429, 429]);
    } finally {
      await redis.restart();
    }
  });
});

describe('STORE_FAILURE=open and closed', () => {
  it('open: admits without a decision while Redis is down', async () => {
    const hits = upstream.hits('/tight');
    for (let i = 0; i < 4; i++) {
      const answer = await http(open.port, '/tight/open');
      expect(answer.status).toBe(200);
      expect(answer.headers['ratelimit-policy']).toBe('"tight";q=2;w=7200');
      expect(answer.headers.ratelimit).toBeUndefined();
    }
    expect(upstream.hits('/tight')).toBe(hits + 4);
    const text = await metrics(open);
    expect(metricValue(text, 'sluice_store_fallbacks_total', { policy: 'open' })).toBe(4);
    expect(metricValue(text, 'sluice_store_breaker_state')).toBe(1);
  });

  it('closed: 503 with Retry-After and nothing proxied', async () => {
    const hits = upstream.hits('/tight');
    const answer = await http(closed.port, '/tight/closed');
    expect(answer.status).toBe(503);
    expect(answer.headers['retry-after']).toBe('1');
    expect(answer.json()).toMatchObject({ statusCode: 503, code: 'SLUICE_STORE_UNAVAILABLE' });
    expect(upstream.hits('/tight')).toBe(hits);
    // requests no rule applies to are not affected
    expect((await http(closed.port, '/free/x')).status).toBe(200);
  });
});
