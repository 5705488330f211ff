/**
 * Refunds are bounded (SPEC §5, `refund.max`), seen at the upstream through a real rules API and gateway
 * on the real Redis: a client whose every request is answered with a refundable 5xx gets at most
 * `capacity + refund.max` requests to the upstream per period, not an unlimited stream (issue 19: 17
 * requests reached the upstream against a capacity of 5, and 20 sequential 500s all did).
 */
import { waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  for (const [name, refund] of [
    ['fails', { statuses: ['5xx'] }],
    ['fails2', { statuses: ['5xx'], max: 2 }],
  ] as const) {
    await api.createRule({
      name,
      match: { path: `/${name}/**` },
      limits: [
        { name: 'calls', client: { by: 'header', name: 'x-api-key' }, capacity: 5, refill: 1, period: '1h' },
      ],
      refund,
    } as unknown as RuleBody);
  }
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_KEY_PREFIX: uniqueKeyPrefix('refund-bound'),
  });
  await waitFor(async () => (await http(gw.port, '/fails2/probe')).status !== 404, 10_000, 'the rules');
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

const as = (key: string) => ({ headers: { 'x-api-key': key } });

/** `waves` waves of 5 requests at once, each answered with a refundable 5xx by the upstream; the statuses. */
async function waves(path: string, key: string, count: number): Promise<number[]> {
  const statuses: number[] = [];
  const upstreamStatuses = [500, 503, 502, 500, 504];
  for (let wave = 0; wave < count; wave++) {
    const answers = await Promise.all(
      upstreamStatuses.map((status) => http(gw.port, `${path}?status=${status}`, as(key))),
    );
    statuses.push(...answers.map((a) => a.status));
    await gw.settled(); // the refunds are in Redis before the next wave
  }
  return statuses;
}

describe('refund.max: refunds give back at most refund.max per limit and client per period', () => {
  it('capacity 5, 1 per hour, refunds on 5xx (default refund.max = capacity): at most 10 of 20 reach the upstream', async () => {
    const statuses = await waves('/fails/a', 'alice', 4);
    expect(upstream.hits('/fails/a')).toBe(10); // 5 admitted on the bucket, 5 more on refunds
    expect(statuses.filter((s) => s === 429)).toHaveLength(10);
    // twenty more, one at a time: every one denied, none reaches the upstream
    for (let i = 0; i < 20; i++)
      expect((await http(gw.port, '/fails/a?status=500', as('alice'))).status).toBe(429);
    expect(upstream.hits('/fails/a')).toBe(10);
  }, 60_000);

  it('refund.max 2: at most capacity + 2 = 7 reach the upstream; another client has its own', async () => {
    await waves('/fails2/b', 'bob', 4);
    expect(upstream.hits('/fails2/b')).toBe(7);
    await waves('/fails2/c', 'carol', 2);
    expect(upstream.hits('/fails2/c')).toBe(7);
  }, 60_000);
});
