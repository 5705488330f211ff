/**
 * The proxy's hot path with no service running: rules given in code (`StaticRules`), the in-process
 * store, and a plain Node upstream on loopback. What a client and an upstream see of one request:
 * its decision headers, a 429, the upstream's own headers stripped, a slot held for the exchange.
 */

import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StaticRules } from '@sluice/engine';
import { MemoryStore, partitionKey, type Rule, storedRule } from '@sluice/shared';
import { waitFor } from '@sluice/test-support';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildGateway, type Gateway } from '../app.js';
import { loadConfig } from '../config/config.js';

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;

/** The upstream: answers after `?ms=` with `?status=`, with its own RateLimit and charge headers; counts requests in flight. */
let upstream: Server;
let upstreamUrl: string;
let inFlight = 0;
let mostInFlight = 0;
const seen: IncomingMessage[] = [];
beforeAll(async () => {
  upstream = createServer((req, res) => {
    seen.push(req);
    inFlight++;
    mostInFlight = Math.max(mostInFlight, inFlight);
    const url = new URL(req.url ?? '/', 'http://x');
    setTimeout(
      () => {
        inFlight--;
        res.writeHead(Number(url.searchParams.get('status') ?? 200), {
          ratelimit: '"upstream";r=99;t=1',
          'x-cost': '3',
        });
        res.end('ok');
      },
      Number(url.searchParams.get('ms') ?? 0),
    );
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => upstream.close(resolve));
});

let running: Gateway | undefined;
afterEach(async () => {
  await running?.close();
  running = undefined;
  mostInFlight = 0;
});

async function start(rules: Rule[]) {
  const config = loadConfig({
    PORT: '0',
    ADMIN_PORT: '0',
    HOST: '127.0.0.1',
    UPSTREAMS: `/=${upstreamUrl}`,
    RULES_API_URL: 'http://127.0.0.1:9',
    LOG_LEVEL: 'silent',
  });
  const source = new StaticRules(rules);
  running = buildGateway(config, { rules: source, store: new MemoryStore(), defaultMetrics: false });
  const { proxyUrl, adminUrl } = await running.start();
  await running.ready();
  return { proxyUrl, adminUrl, source };
}

describe('the hot path, in process', () => {
  it('admits with the rule’s headers (never the upstream’s), then answers 429 with its body', async () => {
    const r = rule({
      name: 'hello',
      match: { path: '/hello' },
      limit: { capacity: 2, refill: 1, period: '1m' },
    });
    const { proxyUrl } = await start([r]);
    const first = await fetch(`${proxyUrl}/hello`);
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"hello";q=2;w=120');
    expect(first.headers.get('ratelimit')).toBe(`"hello";r=1;t=60;pk=${partitionKey('ip:127.0.0.1')}`);
    await fetch(`${proxyUrl}/hello`);
    const denied = await fetch(`${proxyUrl}/hello`);
    expect(denied.status).toBe(429);
    expect(denied.headers.get('retry-after')).toBe('60');
    expect(denied.headers.get('content-type')).toMatch(/^application\/problem\+json;/);
    expect(await denied.json()).toEqual({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      title: 'Request cannot be satisfied as assigned quota has been exceeded',
      status: 429,
      detail: 'rate limit of rule "hello" exceeded',
      'violated-policies': ['hello'],
      code: 'SLUICE_RATE_LIMITED',
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'rate limit of rule "hello" exceeded',
      rule: 'hello',
      retryAfter: 60,
      requestId: denied.headers.get('x-request-id'),
    });
  });

  it('a path no rule takes is proxied untouched, the upstream’s own headers included', async () => {
    const { proxyUrl } = await start([]);
    const response = await fetch(`${proxyUrl}/free`);
    expect(response.status).toBe(200);
    expect(response.headers.get('ratelimit')).toBe('"upstream";r=99;t=1');
  });

  it('a concurrency slot is held until the response ends: the upstream never sees more than max', async () => {
    const r = rule({
      name: 'slots',
      match: { path: '/slow' },
      limits: [{ name: 'inflight', algorithm: 'concurrency', max: 2 }],
    });
    const { proxyUrl, adminUrl } = await start([r]);
    const pending = Promise.all(
      Array.from({ length: 6 }, () => fetch(`${proxyUrl}/slow?ms=300`).then((res) => res.status)),
    );
    await waitFor(() => inFlight === 2, 5_000, 'the two admitted requests at the upstream');
    // the in-process store's slots, as GET /usage reads them
    const usage = (await fetch(`${adminUrl}/usage?rule=slots&client=ip:127.0.0.1`).then((res) =>
      res.json(),
    )) as { limits: { inFlight: number; remaining: number }[] };
    expect(usage.limits[0]).toMatchObject({ inFlight: 2, remaining: 0 });
    const statuses = await pending;
    expect(statuses.filter((s) => s === 200)).toHaveLength(2);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
    expect(mostInFlight).toBe(2);
    // both slots came back at the end of their exchanges
    await running!.limiter.core.settled();
    const again = await Promise.all([fetch(`${proxyUrl}/slow`), fetch(`${proxyUrl}/slow`)]);
    expect(again.map((res) => res.status)).toEqual([200, 200]);
  });

  it('charges what the upstream says (its charge header never reaches the client) and follows a rule change', async () => {
    const r = rule({
      name: 'priced',
      match: { path: '/priced' },
      limit: { capacity: 5, refill: 1, period: '1h' },
      maxDebt: 0,
      charge: { from: 'header', header: 'x-cost' },
    });
    const { proxyUrl, adminUrl, source } = await start([r]);
    const response = await fetch(`${proxyUrl}/priced`);
    expect(response.headers.get('x-cost')).toBeNull();
    await response.text();
    // admitted on 1, charged 3: 2 left (the settlement lands after the response)
    await running!.limiter.core.settled();
    const usage = (await fetch(`${adminUrl}/usage?rule=priced&client=ip:127.0.0.1`).then((res) =>
      res.json(),
    )) as {
      limits: { remaining: number }[];
    };
    expect(usage.limits[0]).toMatchObject({ remaining: 2 });
    // a shadow rule never refuses: far past the limit, every request goes through
    source.set([{ ...r, shadow: true }]);
    for (let i = 0; i < 4; i++) expect((await fetch(`${proxyUrl}/priced`)).status).toBe(200);
  });
});
