/**
 * STORE_FAILURE=local's fair share (SPEC §1): three gateways on one Redis learn from their heartbeats
 * that they are three; with Redis SIGKILLed for 3 s under 300 req/s, each holds a third of the limit,
 * so together they admit about the limit, not three times it. A gateway alone keeps the whole limit.
 */
import { Agent } from 'node:http';
import { sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { type RedisProcess, startRedisServer } from './helpers/redis.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

/** One global bucket: small against its refill, so the run's bound is mostly rate·T. */
const CAPACITY = 10;
const RATE_PER_S = 50;

let api: RulesApi;
let upstream: Upstream;
let redis: RedisProcess;
const gateways: RunningGateway[] = [];
const metrics = async (gw: RunningGateway) => (await fetch(`${gw.adminUrl}/metrics`)).text();

beforeAll(async () => {
  [api, upstream, redis] = await Promise.all([startRulesApi(), startUpstream(), startRedisServer()]);
  await api.createRule({
    name: 'shared',
    match: { path: '/shared/**' },
    client: { by: 'global' },
    limit: { capacity: CAPACITY, refill: RATE_PER_S, period: '1s' },
    maxDebt: 0,
  });
  const env = {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: uniqueKeyPrefix('fair-share'),
  };
  for (let i = 0; i < 3; i++) gateways.push(await startGateway(env, { storeCoolDownMs: 200 }));
}, 60_000);

afterAll(async () => {
  await Promise.all(gateways.map((gw) => gw.close()));
  await Promise.all([api?.close(), upstream?.close(), redis?.close()]);
});

describe('STORE_FAILURE=local holds a fair share', () => {
  it('three gateways learn they are three from their heartbeats', async () => {
    await waitFor(
      async () =>
        (await Promise.all(gateways.map(metrics))).every(
          (text) => metricValue(text, 'sluice_fallback_gateways') === 3,
        ),
      10_000,
      'every gateway to count 3',
    );
    expect(metricValue(await metrics(gateways[0]!), 'sluice_fallback_share')).toBeCloseTo(1 / 3, 5);
  });

  it('Redis SIGKILLed for 3 s at 300 req/s: together they admit at most 1.2 × (capacity + rate·T)', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 32 });
    const statuses: Promise<number>[] = [];
    const startedAt = performance.now();
    const runMs = 6_000;
    const outage = (async () => {
      await sleep(1_500);
      await redis.kill();
      await sleep(3_000);
      await redis.restart();
    })();
    // 300 req/s, round-robin over the three gateways, paced in 10 ms ticks
    let sent = 0;
    while (performance.now() - startedAt < runMs) {
      const due = Math.floor(((performance.now() - startedAt) * 300) / 1000);
      for (; sent < due; sent++) {
        const gw = gateways[sent % 3]!;
        statuses.push(http(gw.port, '/shared/x', { agent }).then((answer) => answer.status));
      }
      await sleep(10);
    }
    const answers = await Promise.all(statuses);
    const elapsedS = (performance.now() - startedAt) / 1000;
    await outage;
    agent.destroy();

    expect(answers.filter((status) => status !== 200 && status !== 429)).toEqual([]);
    const admitted = answers.filter((status) => status === 200).length;
    const bound = CAPACITY + RATE_PER_S * elapsedS;
    // the restarted Redis is empty: its bucket starts full once more, within the 1.2
    expect(admitted).toBeLessThanOrEqual(1.2 * bound);
    // and the outage did not lock clients out: the shares kept admitting
    expect(admitted).toBeGreaterThan(0.7 * bound);
    const fallbacks = await Promise.all(
      gateways.map(async (gw) =>
        metricValue(await metrics(gw), 'sluice_store_fallbacks_total', { policy: 'local' }),
      ),
    );
    expect(fallbacks.every((count) => count > 0)).toBe(true);
  }, 30_000);

  it('a gateway that stops leaves the count at once; one alone keeps the whole limit', async () => {
    await waitFor(
      async () => metricValue(await metrics(gateways[0]!), 'sluice_store_breaker_state') === 0,
      10_000,
      'the breaker to close after the restart',
    );
    const [first, ...others] = gateways;
    await Promise.all(others.map((gw) => gw.close()));
    gateways.splice(1);
    await waitFor(
      async () => metricValue(await metrics(first!), 'sluice_fallback_gateways') === 1,
      5_000,
      'the remaining gateway to count 1',
    );
    await redis.kill();
    try {
      // the bucket as the store saw it is gone with Redis: the local one starts full, the whole capacity
      const statuses: number[] = [];
      for (let i = 0; i < CAPACITY + 2; i++) statuses.push((await http(first!.port, '/shared/y')).status);
      expect(statuses.filter((status) => status === 200).length).toBeGreaterThanOrEqual(CAPACITY);
      expect(metricValue(await metrics(first!), 'sluice_fallback_share')).toBe(1);
    } finally {
      await redis.restart();
    }
  }, 30_000);
});
