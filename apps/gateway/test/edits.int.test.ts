/**
 * Edits of a limit in use, through a real rules API and gateway on the real Redis (issue 19's two
 * findings): a sliding window's `window` edited from 1m to 1h asks for a wait within the new window (it
 * asked for 3,357 years), and refunds computed for a token bucket that was edited into a sliding
 * window meanwhile do not wipe the window (10 were admitted in a window of 5).
 */
import { SecretClientKeys } from '@sluice/shared';
import { waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const prefix = uniqueKeyPrefix('edits');

let api: RulesApi;
let upstream: Upstream;
let gw: RunningGateway;
let admin: Redis;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  admin = new Redis(REDIS_URL);
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    UPSTREAM_TIMEOUT_MS: '10000',
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
  await admin?.quit();
});

const as = (key: string) => ({ headers: { 'x-api-key': key } });

/** Waits until the gateway enforces the edited rule: a probe client's policy header says so. */
async function untilEnforced(path: string, policy: string): Promise<void> {
  await waitFor(
    async () => (await http(gw.port, path, as('probe'))).headers['ratelimit-policy'] === policy,
    10_000,
    `the edited rule (${policy})`,
  );
}

describe('edits of a limit in use', () => {
  it('a sliding window edited from 1m to 1h: the wait stays within the new window, and its count carries over', async () => {
    const body = (window: string) =>
      ({
        name: 'win',
        match: { path: '/win/**' },
        limits: [
          {
            name: 'w',
            client: { by: 'header', name: 'x-api-key' },
            algorithm: 'sliding-window',
            max: 5,
            window,
          },
        ],
      }) as unknown as RuleBody;
    const rule = await api.createRule(body('1m'));
    await untilEnforced('/win/probe', '"win.w";q=5;w=60');
    expect((await http(gw.port, '/win/a', as('alice'))).status).toBe(200);
    expect((await http(gw.port, '/win/a', as('alice'))).status).toBe(200);

    await api.updateRule(rule.id, body('1h'));
    await untilEnforced('/win/probe', '"win.w";q=5;w=3600');
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await http(gw.port, '/win/a', as('alice')));
    // the two of the last minute still count in the new hour
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429, 429]);
    for (const denied of answers.slice(3)) {
      const retryAfter = Number(denied.headers['retry-after']);
      expect(retryAfter).toBeGreaterThan(0);
      expect(retryAfter).toBeLessThanOrEqual(2 * 3_600); // at most two windows; it was 105,945,403,925
    }
    // x-api-key is a credential: alice's keys carry the hash of her key, not the key
    const alice = new SecretClientKeys(undefined).clientKey('alice')!.slice('header:~'.length);
    const keys = (await admin.keys(`${prefix}*${alice}*`)).filter((key) => key.endsWith(':w'));
    expect(keys).toHaveLength(1);
    const pttl = await admin.pttl(keys[0]!);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(2 * 3_600_000); // it was ~3,357 years
  }, 60_000);

  it('refunds computed for a token bucket edited into a sliding window meanwhile are dropped: the window admits 5, not 10', async () => {
    const bucket = {
      name: 'a',
      match: { path: '/slow/**' },
      limits: [
        { name: 'x', client: { by: 'header', name: 'x-api-key' }, capacity: 5, refill: 1, period: '1h' },
      ],
      refund: { statuses: ['5xx'] },
    };
    const rule = await api.createRule(bucket as unknown as RuleBody);
    await untilEnforced('/slow/probe?ms=0', '"a.x";q=5;w=18000');

    // two requests in flight, admitted on the token bucket, that will answer 503 (refundable)
    const inFlight = [0, 1].map(() => http(gw.port, '/slow/a?ms=4000&status=503', as('bob')));
    await waitFor(async () => upstream.hits('/slow/a?ms=4000') === 2, 5_000, 'the two requests upstream');

    await api.updateRule(rule.id, {
      ...bucket,
      limits: [
        {
          name: 'x',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'sliding-window',
          max: 5,
          window: '1h',
        },
      ],
    } as unknown as RuleBody);
    await untilEnforced('/slow/probe?ms=0', '"a.x";q=5;w=3600');
    const first = [];
    for (let i = 0; i < 5; i++) first.push((await http(gw.port, '/slow/b?ms=0', as('bob'))).status);
    expect(first).toEqual([200, 200, 200, 200, 200]);

    // the old two answer 503: their refunds were computed for the token bucket
    expect((await Promise.all(inFlight)).map((a) => a.status)).toEqual([503, 503]);
    await gw.settled(); // the settlements are in Redis
    const second = [];
    for (let i = 0; i < 5; i++) second.push((await http(gw.port, '/slow/b?ms=0', as('bob'))).status);
    expect(second).toEqual([429, 429, 429, 429, 429]);
    expect(upstream.hits('/slow/b')).toBe(5);
  }, 60_000);
});
