/**
 * A request's whole life (docs/lifecycle.md), seen from outside on the real Redis: concurrency limits across two
 * gateways (measured at the upstream), slots freed by aborted exchanges and by expiry after a SIGKILL,
 * and charging at the response (a header-priced upstream, refunds, a lying upstream).
 */
import type { ChildProcess } from 'node:child_process';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { partitionKey, SecretClientKeys } from '@sluice/shared';
import { sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type RunningGateway,
  spawnGatewayProcess,
  startGateway,
  uniqueKeyPrefix,
} from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
/** the in-process gateways' UPSTREAM_TIMEOUT_MS */
const UPSTREAM_TIMEOUT_MS = 2_000;

/**
 * An upstream that measures what a concurrency limit promises: per client key (`x-api-key`), how
 * many requests it holds at once. `/held?ms=` holds each response (default 500 ms); `/priced` answers
 * `?status=` (default 200) with `x-sluice-cost: <?cost=>` after `?ms=` (default 0).
 */
interface MeasuringUpstream {
  url: string;
  maxInFlight(key: string): number;
  inFlight(key: string): number;
  close(): Promise<void>;
}

async function startMeasuringUpstream(): Promise<MeasuringUpstream> {
  const current = new Map<string, number>();
  const most = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream');
    const key = String(req.headers['x-api-key'] ?? '');
    const ms = Number(url.searchParams.get('ms') ?? (url.pathname.startsWith('/held') ? 500 : 0));
    let open = true;
    const leave = () => {
      if (!open) return;
      open = false;
      current.set(key, (current.get(key) ?? 1) - 1);
    };
    current.set(key, (current.get(key) ?? 0) + 1);
    most.set(key, Math.max(most.get(key) ?? 0, current.get(key)!));
    res.on('close', leave);
    req.resume();
    setTimeout(() => {
      leave();
      if (res.destroyed) return;
      const headers: Record<string, string> = { 'content-type': 'text/plain' };
      const cost = url.searchParams.get('cost');
      if (cost !== null) headers['x-sluice-cost'] = cost;
      res.writeHead(Number(url.searchParams.get('status') ?? 200), headers);
      res.end('ok');
    }, ms);
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    maxInFlight: (key) => most.get(key) ?? 0,
    inFlight: (key) => current.get(key) ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

let api: RulesApi;
let upstream: MeasuringUpstream;
let one: RunningGateway;
let two: RunningGateway;
const prefix = uniqueKeyPrefix('lifecycle');
const children: ChildProcess[] = [];

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startMeasuringUpstream()]);
  await api.createRule({
    name: 'inflight',
    match: { path: '/held/**' },
    limits: [
      { name: 'slots', client: { by: 'header', name: 'x-api-key' }, algorithm: 'concurrency', max: 3 },
    ],
  } as unknown as RuleBody);
  await api.createRule({
    name: 'priced',
    match: { path: '/priced/**' },
    limits: [
      {
        name: 'tokens',
        client: { by: 'header', name: 'x-api-key' },
        capacity: 100,
        refill: 1,
        period: '1h',
        maxDebt: 0,
      },
    ],
    cost: 10,
    charge: { from: 'header', header: 'x-sluice-cost', max: 50 },
    refund: { statuses: [503, 504] },
  } as unknown as RuleBody);
  const env = {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS),
    // exact decisions only: on a busy machine a 50 ms store timeout would let the local fallback decide
    STORE_TIMEOUT_MS: '2000',
  };
  [one, two] = await Promise.all([startGateway(env), startGateway(env)]);
}, 60_000);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await Promise.all([one?.close(), two?.close()]);
  await Promise.all([api?.close(), upstream?.close()]);
});

const as = (key: string) => ({ headers: { 'x-api-key': key } });
/** draft-11's partition key of the client `alice` (x-api-key is a credential: keyed by its hash) */
const alicePk = `;pk=${partitionKey(new SecretClientKeys(undefined).clientKey('alice')!)}`;

describe('concurrency: at most max requests of a client in flight, across gateways', () => {
  it('two gateways on one Redis: the upstream never holds more than 3 of the client at once; the rest get 429 Retry-After: 1', async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => http((i % 2 ? one : two).port, '/held/a', as('alice'))),
    );
    const admitted = answers.filter((a) => a.status === 200);
    const denied = answers.filter((a) => a.status === 429);
    expect(admitted).toHaveLength(3);
    expect(denied).toHaveLength(7);
    expect(upstream.maxInFlight('alice')).toBe(3);
    for (const answer of denied) {
      expect(answer.headers['retry-after']).toBe('1');
      expect(answer.json()).toMatchObject({ rule: 'inflight', limit: 'slots', retryAfter: 1 });
      expect(answer.headers.ratelimit).toBe(`"inflight.slots";r=0;t=1${alicePk}`);
    }
    expect(admitted[0]!.headers['ratelimit-policy']).toBe('"inflight.slots";q=3;qu="concurrent-requests"');
    expect(admitted.map((a) => a.headers.ratelimit).sort()).toEqual([
      `"inflight.slots";r=0;t=1${alicePk}`,
      `"inflight.slots";r=1;t=0${alicePk}`,
      `"inflight.slots";r=2;t=0${alicePk}`,
    ]);

    // every slot came back with its response: the next three go through at once, again
    await Promise.all([one.settled(), two.settled()]);
    const again = await Promise.all([one, two, one].map((g) => http(g.port, '/held/a', as('alice'))));
    expect(again.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(upstream.maxInFlight('alice')).toBe(3);
  }, 30_000);

  it('a client that aborts: the gateway aborts its upstream request, and its slot is free once that is done', async () => {
    const aborted = Array.from({ length: 3 }, (_, i) => {
      const req = httpRequest({
        host: '127.0.0.1',
        port: (i % 2 ? one : two).port,
        path: '/held/b?ms=5000',
        headers: { 'x-api-key': 'bob' },
        agent: false,
      });
      req.on('error', () => {});
      req.end();
      return req;
    });
    await waitFor(async () => upstream.inFlight('bob') === 3, 5_000, 'the three held requests');
    expect((await http(one.port, '/held/b?ms=0', as('bob'))).status).toBe(429);
    for (const req of aborted) req.destroy();
    // the gateway aborted the abandoned requests: the upstream no longer works on them
    await waitFor(async () => upstream.inFlight('bob') === 0, 2_000, 'the aborted upstream requests');
    await Promise.all([one.settled(), two.settled()]);
    const after = await Promise.all([one, two, one].map((g) => http(g.port, '/held/b?ms=0', as('bob'))));
    expect(after.map((a) => a.status)).toEqual([200, 200, 200]);
  }, 30_000);

  it('a gateway SIGKILLed with slots held: they come back after UPSTREAM_TIMEOUT_MS + 5 s, not before', async () => {
    const { child, port } = await spawnGatewayProcess({
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      REDIS_URL,
      REDIS_KEY_PREFIX: prefix,
      // its slots expire 1 s + 5 s after they are taken
      UPSTREAM_TIMEOUT_MS: '1000',
    });
    children.push(child);
    const held = Array.from({ length: 3 }, () =>
      http(port, '/held/c?ms=10000', as('carol')).catch(() => undefined),
    );
    await waitFor(async () => upstream.inFlight('carol') === 3, 5_000, 'the three held requests');
    const takenAtMs = Date.now();
    child.kill('SIGKILL');
    await Promise.all(held);

    // the dead gateway never gave its slots back: denied until they expire
    expect((await http(one.port, '/held/c?ms=0', as('carol'))).status).toBe(429);
    await sleep(4_500 - (Date.now() - takenAtMs));
    expect((await http(two.port, '/held/c?ms=0', as('carol'))).status).toBe(429);
    let admittedAtMs = 0;
    await waitFor(
      async () => {
        const answer = await http(one.port, '/held/c?ms=0', as('carol'));
        admittedAtMs = Date.now();
        return answer.status === 200;
      },
      10_000,
      'the expired slots',
    );
    const afterMs = admittedAtMs - takenAtMs;
    expect(afterMs).toBeGreaterThanOrEqual(5_000);
    expect(afterMs).toBeLessThan(8_000);
  }, 60_000);
});

/** The `r` of the RateLimit header. */
const remaining = (answer: { headers: Record<string, unknown> }) =>
  Number(/;r=(\d+)/.exec(String(answer.headers.ratelimit))?.[1]);

describe('charging at the response and refunds', () => {
  it('a header-priced upstream: the next response shows the settled balance; the price never reaches the client', async () => {
    const first = await http(one.port, '/priced/x?cost=3', as('dave'));
    expect(first.status).toBe(200);
    expect(remaining(first)).toBe(90); // admitted on cost 10
    expect(first.headers['x-sluice-cost']).toBeUndefined();
    const second = await http(one.port, '/priced/x?cost=3', as('dave'));
    expect(remaining(second)).toBe(87); // 100 - 3 (settled) - 10 (admitted)
    // the other gateway sees the same settled balance
    const third = await http(two.port, '/priced/x?cost=0', as('dave'));
    expect(remaining(third)).toBe(84); // 100 - 3 - 3 - 10
  }, 30_000);

  it('a 503 with refund gives the whole cost back', async () => {
    const failed = await http(one.port, '/priced/x?status=503&cost=40', as('erin'));
    expect(failed.status).toBe(503);
    expect(remaining(failed)).toBe(90);
    expect(failed.headers['x-sluice-cost']).toBeUndefined();
    // refunded, and the stated 40 was not charged
    expect(remaining(await http(one.port, '/priced/x?cost=10', as('erin')))).toBe(90);
  }, 30_000);

  it("the gateway's own 504 is never refunded (the upstream worked the whole timeout); an upstream's 504 is", async () => {
    const timedOut = await http(one.port, `/priced/x?ms=${UPSTREAM_TIMEOUT_MS + 1_000}`, as('frank'));
    expect(timedOut.status).toBe(504);
    await Promise.all([one.settled(), two.settled()]);
    const upstream504 = await http(one.port, '/priced/x?status=504', as('frank'));
    expect(upstream504.status).toBe(504);
    expect(remaining(upstream504)).toBe(80); // the timeout's 10 kept
    await Promise.all([one.settled(), two.settled()]);
    expect(remaining(await http(one.port, '/priced/x?cost=10', as('frank')))).toBe(80);
  }, 30_000);

  it('a lying upstream: garbage and negative prices are ignored (the cost stands), a huge one is capped at charge.max', async () => {
    const r: number[] = [];
    for (const cost of ['abc', '-5', '1e9', '0', '10']) {
      r.push(remaining(await http(one.port, `/priced/x?cost=${encodeURIComponent(cost)}`, as('grace'))));
    }
    // abc: 10 stands (90); -5: stands (80); 1e9: admitted at 70, settled at 50 (100-10-10-50 = 30);
    // 0: admitted at 20, given back (30); 10: admitted at 20
    expect(r).toEqual([90, 80, 70, 20, 20]);
  }, 30_000);
});
