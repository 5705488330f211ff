/**
 * Charges a client cannot dodge (SPEC §5, turn 3), through a real gateway on the real Redis: a
 * `bytes` or `duration` charge never settles below the admission cost because the client sent `HEAD`
 * or went away right after the headers; a charge header too large to be a finite number is capped at
 * `charge.max`; the gateway's own 504 is never refunded.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const UPSTREAM_TIMEOUT_MS = 600;
const BODY_BYTES = 200_000;

/**
 * An upstream that counts what reaches it (per path prefix). `/big…` answers a 200 KB body (headers
 * flushed first; `?every=`: streamed in 1 KB chunks); `/priced…` answers `x-cost: <?cost=>`; `/slow…`
 * answers after `?ms=`.
 */
interface CountingUpstream {
  url: string;
  hits(prefix: string): number;
  close(): Promise<void>;
}

async function startCountingUpstream(): Promise<CountingUpstream> {
  const hits: string[] = [];
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream');
    hits.push(url.pathname);
    req.resume();
    if (url.pathname.startsWith('/big')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY_BYTES });
      res.flushHeaders();
      // `?every=`: the body in 1 KB chunks that many ms apart, as a large download streams
      const every = Number(url.searchParams.get('every') ?? 0);
      if (every === 0) {
        res.end(Buffer.alloc(BODY_BYTES, 97));
        return;
      }
      let sent = 0;
      const timer = setInterval(() => {
        if (res.destroyed || sent >= BODY_BYTES) {
          clearInterval(timer);
          res.end();
          return;
        }
        res.write(Buffer.alloc(1000, 97));
        sent += 1000;
      }, every);
      return;
    }
    const headers: Record<string, string> = { 'content-type': 'text/plain' };
    const cost = url.searchParams.get('cost');
    if (cost !== null) headers['x-cost'] = cost;
    setTimeout(
      () => {
        if (res.destroyed) return;
        res.writeHead(Number(url.searchParams.get('status') ?? 200), headers);
        res.end('ok');
      },
      Number(url.searchParams.get('ms') ?? 0),
    );
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: (prefix) => hits.filter((path) => path.startsWith(prefix)).length,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

let api: RulesApi;
let upstream: CountingUpstream;
let gw: RunningGateway;

const bucket = (capacity: number) => ({
  name: 'tokens',
  client: { by: 'header', name: 'x-api-key' },
  capacity,
  refill: 1,
  period: '1h',
  maxDebt: 0,
});

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startCountingUpstream()]);
  const rules = [
    {
      name: 'by-bytes',
      match: { path: '/big/**' },
      limits: [bucket(30)],
      cost: 10,
      charge: { from: 'bytes', unitBytes: 1000 },
    },
    {
      name: 'by-duration',
      match: { path: '/timed/**' },
      limits: [bucket(30)],
      cost: 10,
      charge: { from: 'duration', unitMs: 1000 },
    },
    {
      name: 'by-header',
      match: { path: '/priced/**' },
      limits: [bucket(100)],
      cost: 1,
      charge: { from: 'header', header: 'x-cost', max: 50 },
    },
    {
      name: 'refunded',
      match: { path: '/slow/**' },
      limits: [bucket(5)],
      refund: { statuses: ['5xx'] },
    },
  ];
  for (const rule of rules) await api.createRule(rule as unknown as RuleBody);
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: uniqueKeyPrefix('charges'),
    UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS),
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

const as = (key: string, method = 'GET') => ({ method, headers: { 'x-api-key': key } });

/** The `r` of the RateLimit header: the balance after this request's admission. */
const remaining = (answer: { headers: Record<string, unknown> }) =>
  Number(/;r=(\d+)/.exec(String(answer.headers.ratelimit))?.[1]);

/** A GET that hangs up as soon as the response headers arrive; resolves with the status. */
function getAndHangUp(port: number, path: string, key: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { 'x-api-key': key }, agent: false });
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (status === 200) req.destroy();
      else res.resume();
      resolve(status);
    });
    req.on('error', (error) => {
      if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(error);
    });
    req.end();
  });
}

describe('bytes and duration charges a client cannot lower', () => {
  it('25 HEAD requests to a byte-charged rule (cost 10, capacity 30): 3 admitted, the rest 429, the upstream sees 3', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      statuses.push((await http(gw.port, '/big/head', as('head-client', 'HEAD'))).status);
      // a settlement (if any) is in Redis before the next decision
      await gw.settled();
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(22);
    expect(upstream.hits('/big/head')).toBe(3);
  }, 60_000);

  it('20 GETs that hang up right after the headers: 3 admitted, the rest 429', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) {
      statuses.push(await getAndHangUp(gw.port, '/big/hangup?every=10', 'hangup-client'));
      // the exchange ends once the gateway has aborted the upstream request; then it settles
      await gw.settled();
    }
    expect(statuses).toEqual([200, 200, 200, ...Array(17).fill(429)]);
  }, 60_000);

  it('a client that reads the whole body pays for its bytes (capped at charge.max, capacity + maxDebt)', async () => {
    const first = await http(gw.port, '/big/read', as('reader'));
    expect(first.status).toBe(200);
    expect(first.body).toHaveLength(BODY_BYTES);
    expect(remaining(first)).toBe(20);
    await gw.settled();
    // 200 tokens of body, capped at 30: the bucket is empty
    expect((await http(gw.port, '/big/read', as('reader'))).status).toBe(429);
  }, 30_000);

  it('a HEAD request to a duration-charged rule keeps its admission cost', async () => {
    const first = await http(gw.port, '/timed/a', as('timed-head', 'HEAD'));
    expect(first.status).toBe(200);
    expect(remaining(first)).toBe(20);
    await gw.settled();
    const second = await http(gw.port, '/timed/a', as('timed-head', 'HEAD'));
    expect(remaining(second)).toBe(10);
  }, 30_000);

  it('a fast GET to a duration-charged rule still settles to its upstream time (one unit)', async () => {
    const first = await http(gw.port, '/timed/a', as('timed-get'));
    expect(remaining(first)).toBe(20);
    await gw.settled();
    // settled to 1 token: 30 - 1 - 10
    expect(remaining(await http(gw.port, '/timed/a', as('timed-get')))).toBe(19);
  }, 30_000);
});

describe('charge header values too large to be finite numbers', () => {
  it.each([
    ['1e309', '1e309'],
    ['400 nines', '9'.repeat(400)],
  ])(
    'x-cost: %s is capped at charge.max (50), not left at the admission cost',
    async (_name, cost) => {
      const key = `huge-${cost.length}`;
      const first = await http(gw.port, `/priced/a?cost=${cost}`, as(key));
      expect(first.status).toBe(200);
      expect(first.headers['x-cost']).toBeUndefined();
      expect(remaining(first)).toBe(99);
      await gw.settled();
      // 100 - 50 (capped) - 1 (this admission)
      expect(remaining(await http(gw.port, '/priced/a?cost=0', as(key)))).toBe(49);
    },
    30_000,
  );
});

describe("the gateway's own 504 is never refunded", () => {
  it('capacity 5 with refunds on 5xx: an endpoint slower than UPSTREAM_TIMEOUT_MS gets 5 requests, then 429', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      statuses.push((await http(gw.port, `/slow/a?ms=${UPSTREAM_TIMEOUT_MS + 1_000}`, as('waver'))).status);
      await gw.settled();
    }
    expect(statuses).toEqual([504, 504, 504, 504, 504, 429, 429, 429]);
    expect(upstream.hits('/slow/a')).toBe(5);
  }, 60_000);

  it("the upstream's own 503 is still refunded", async () => {
    // five refunds: refund.max defaults to the capacity (5) per period, so each of these is given back
    for (let i = 0; i < 5; i++) {
      const answer = await http(gw.port, '/slow/b?status=503', as('refunded-503'));
      expect(answer.status).toBe(503);
      await gw.settled();
    }
    expect(remaining(await http(gw.port, '/slow/b', as('refunded-503')))).toBe(4);
  }, 30_000);
});
