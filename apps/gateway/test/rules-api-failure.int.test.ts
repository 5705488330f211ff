/**
 * The rules cache when the rules API is away (docs/gateway.md): not ready (and nothing
 * proxied) before the first snapshot; the last good rules keep being enforced after it dies.
 */

import { freePort, sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi | undefined;
let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  upstream = await startUpstream();
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

describe('rules API away', () => {
  it('before the first snapshot: /readyz 503 and requests refused 503; ready once the API answers', async () => {
    const apiPort = await freePort();
    gw = await startGateway(
      {
        UPSTREAMS: `/=${upstream.url}`,
        RULES_API_URL: `http://127.0.0.1:${apiPort}`,
        RULES_API_TOKEN: READ_TOKEN,
        REDIS_URL: 'redis://127.0.0.1:6379',
        REDIS_KEY_PREFIX: uniqueKeyPrefix('rules-away'),
      },
      {},
      { waitReady: false },
    );
    const notReady = await fetch(`${gw.adminUrl}/readyz`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toMatchObject({ rulesVersion: null });
    const refused = await http(gw.port, '/limited/x');
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json()).toMatchObject({ code: 'SLUICE_RULES_NOT_LOADED' });
    expect(upstream.hits()).toBe(0);
    await waitFor(
      async () =>
        metricValue(
          await (await fetch(`${gw.adminUrl}/metrics`)).text(),
          'sluice_rules_refresh_failures_total',
          {
            reason: 'unreachable',
          },
        ) > 0,
      5_000,
      'a counted load failure',
    );

    api = await startRulesApi({ port: apiPort });
    await api.createRule({
      name: 'limited',
      match: { path: '/limited/**' },
      limit: { capacity: 2, refill: 1, period: '1h' },
    });
    await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 10_000, 'readiness');
    await gw.gateway.ready();
  }, 60_000);

  it('after the rules API dies: the last good rules stay enforced and the failures are counted', async () => {
    await waitFor(
      async () => (await http(gw.port, '/limited/x')).headers['ratelimit-policy'] !== undefined,
      5_000,
      'the rule',
    );
    await api!.kill();
    // let at least two refreshes fail
    await sleep(2_500);
    const statuses = [];
    // a client address of its own: a fresh bucket of capacity 2
    for (let i = 0; i < 3; i++)
      statuses.push((await http(gw.port, '/limited/y', { localAddress: '127.0.0.7' })).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect((await fetch(`${gw.adminUrl}/readyz`)).status).toBe(200);
    const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    expect(
      metricValue(text, 'sluice_rules_refresh_failures_total', { reason: 'unreachable' }),
    ).toBeGreaterThanOrEqual(2);
    expect(metricValue(text, 'sluice_rules_age_seconds')).toBeGreaterThanOrEqual(2);
    expect(metricValue(text, 'sluice_rules_loaded')).toBe(1);
  }, 20_000);
});
