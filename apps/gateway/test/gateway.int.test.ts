/**
 * End to end: a real rules API (its own Postgres database), real Redis, a real upstream, and
 * gateways built in-process on port 0. Each rule has a path of its own, so tests do not share buckets.
 */
import { connect } from 'node:net';
import { partitionKey } from '@sluice/shared';
import { freePort, sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http, rawHttp } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, type StoredRule, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let upstream: Upstream;
let upstreamV2: Upstream;
let gw: RunningGateway;
let changeRule: StoredRule;
const REDIS_URL = 'redis://127.0.0.1:6379';

beforeAll(async () => {
  [api, upstream, upstreamV2] = await Promise.all([startRulesApi(), startUpstream(), startUpstream()]);
  const hour = '1h';
  const rules = [
    { name: 'burst', match: { path: '/burst/**' }, limit: { capacity: 3, refill: 1, period: '1s' } },
    {
      name: 'slow-refill',
      match: { path: '/slowrefill/**' },
      limit: { capacity: 2, refill: 2, period: '10s' },
    },
    { name: 'debt', match: { path: '/debt/**' }, limit: { capacity: 10, refill: 1, period: '1s' }, cost: 8 },
    {
      name: 'no-debt',
      match: { path: '/nodebt/**' },
      limit: { capacity: 10, refill: 1, period: '1s' },
      cost: 8,
      maxDebt: 0,
    },
    {
      name: 'keyed',
      match: { path: '/keyed/**' },
      client: { by: 'header' as const, name: 'X-Api-Key' },
      limit: { capacity: 1, refill: 1, period: hour },
    },
    { name: 'per-ip', match: { path: '/perip/**' }, limit: { capacity: 1, refill: 1, period: hour } },
    {
      name: 'shadowed',
      match: { path: '/shadow/**' },
      limit: { capacity: 1, refill: 1, period: hour },
      shadow: true,
    },
    {
      name: 'posts-only',
      match: { path: '/posts/**', methods: ['POST'] },
      limit: { capacity: 1, refill: 1, period: hour },
    },
    {
      name: 'hosted',
      match: { path: '/hosted/**', host: 'api.example.com' },
      limit: { capacity: 1, refill: 1, period: hour },
    },
    { name: 'upload', match: { path: '/upload/**' }, limit: { capacity: 1, refill: 1, period: hour } },
    {
      name: 'everyone',
      match: { path: '/everyone/**' },
      client: { by: 'global' as const },
      limit: { capacity: 2, refill: 1, period: hour },
    },
    {
      name: 'disabled',
      match: { path: '/disabled/**' },
      limit: { capacity: 1, refill: 1, period: hour },
      enabled: false,
    },
  ];
  for (const rule of rules) await api.createRule(rule);
  changeRule = await api.createRule({
    name: 'change',
    match: { path: '/change/**' },
    limit: { capacity: 1, refill: 1, period: hour },
  });
  const closedPort = await freePort();
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url},/api/v2=${upstreamV2.url},/dead=http://127.0.0.1:${closedPort},/slow=${upstream.url}`,
    UPSTREAM_TIMEOUT_MS: '700',
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: uniqueKeyPrefix('gateway'),
    BODY_LIMIT_BYTES: '4096',
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close(), upstreamV2?.close()]);
});

const get = (path: string, headers: Record<string, string> = {}) => http(gw.port, path, { headers });
/** draft-11's partition key of the tests' client (127.0.0.1), as every per-IP RateLimit item ends */
const pk = `;pk=${partitionKey('ip:127.0.0.1')}`;

describe('token bucket through the gateway', () => {
  it('admits a burst of capacity, then 429 with Retry-After, headers and body as documented', async () => {
    const hitsBefore = upstream.hits('/burst');
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await get('/burst/a'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    expect(answers[0]!.headers['ratelimit-policy']).toBe('"burst";q=3;w=3');
    expect(answers.slice(0, 3).map((a) => a.headers.ratelimit)).toEqual([
      `"burst";r=2;t=1${pk}`,
      `"burst";r=1;t=1${pk}`,
      `"burst";r=0;t=1${pk}`,
    ]);
    const denied = answers[3]!;
    expect(denied.headers['retry-after']).toBe('1');
    // draft-11's quota-exceeded problem (RFC 9457), with Sluice's own members kept
    expect(denied.headers['content-type']).toMatch(/^application\/problem\+json;/);
    // draft-11: t is until one more token, so it never exceeds Retry-After
    expect(denied.headers.ratelimit).toBe(`"burst";r=0;t=1${pk}`);
    expect(denied.json()).toEqual({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      title: 'Request cannot be satisfied as assigned quota has been exceeded',
      status: 429,
      detail: expect.any(String),
      'violated-policies': ['burst'],
      code: 'SLUICE_RATE_LIMITED',
      statusCode: 429,
      error: 'Too Many Requests',
      message: expect.any(String),
      rule: 'burst',
      retryAfter: 1,
      requestId: denied.headers['x-request-id'],
    });
    expect(upstream.hits('/burst')).toBe(hitsBefore + 3);
  });

  it('refills continuously: one token per second comes back', async () => {
    await sleep(1100);
    expect((await get('/burst/a')).status).toBe(200);
    expect((await get('/burst/a')).status).toBe(429);
  });

  it('Retry-After counts whole seconds until a token is back (5 s per token)', async () => {
    expect((await get('/slowrefill/x')).status).toBe(200);
    expect((await get('/slowrefill/x')).status).toBe(200);
    const denied = await get('/slowrefill/x');
    expect(denied.status).toBe(429);
    expect(denied.headers['retry-after']).toBe('5');
    expect(denied.json().retryAfter).toBe(5);
    expect(denied.headers['ratelimit-policy']).toBe('"slow-refill";q=2;w=10');
    // the same answer again comes from the denial cache: same numbers
    const again = await get('/slowrefill/x');
    expect(again.status).toBe(429);
    expect(again.headers['retry-after']).toBe('5');
    expect(again.headers.ratelimit).toBe(`"slow-refill";r=0;t=5${pk}`);
  });

  it('debt: cost 8, capacity 10 → two admitted, third denied with Retry-After 7', async () => {
    const a = await get('/debt/x');
    const b = await get('/debt/x');
    const c = await get('/debt/x');
    expect([a.status, b.status, c.status]).toEqual([200, 200, 429]);
    expect(a.headers.ratelimit).toBe(`"debt";r=2;t=1${pk}`);
    expect(b.headers.ratelimit).toBe(`"debt";r=0;t=7${pk}`);
    expect(c.headers['retry-after']).toBe('7');
    expect(c.json().retryAfter).toBe(7);
  });

  it('maxDebt 0: only one admitted, then Retry-After until 8 tokens are back', async () => {
    const a = await get('/nodebt/x');
    const b = await get('/nodebt/x');
    expect([a.status, b.status]).toEqual([200, 429]);
    expect(b.headers['retry-after']).toBe('6');
  });
});

describe('clients', () => {
  it('header clients have a bucket per header value; no header falls back to the IP', async () => {
    expect((await get('/keyed/x', { 'x-api-key': 'alpha' })).status).toBe(200);
    expect((await get('/keyed/x', { 'x-api-key': 'alpha' })).status).toBe(429);
    expect((await get('/keyed/x', { 'x-api-key': 'beta' })).status).toBe(200);
    expect((await get('/keyed/x')).status).toBe(200);
    expect((await get('/keyed/x')).status).toBe(429);
    // a header value that looks like an ip key does not share the ip bucket
    expect((await get('/keyed/x', { 'x-api-key': 'ip:127.0.0.1' })).status).toBe(200);
  });

  it('ip clients: each source address has its own bucket', async () => {
    const from = (localAddress: string) => http(gw.port, '/perip/x', { localAddress });
    expect((await from('127.0.0.1')).status).toBe(200);
    expect((await from('127.0.0.1')).status).toBe(429);
    expect((await from('127.0.0.2')).status).toBe(200);
    expect((await from('127.0.0.3')).status).toBe(200);
    expect((await from('127.0.0.2')).status).toBe(429);
  });

  it('a spoofed X-Forwarded-For is ignored when TRUST_PROXY is off', async () => {
    const spoof = (ip: string) =>
      http(gw.port, '/perip/spoof', { localAddress: '127.0.0.9', headers: { 'x-forwarded-for': ip } });
    expect((await spoof('203.0.113.1')).status).toBe(200);
    expect((await spoof('203.0.113.2')).status).toBe(429);
    expect((await spoof('198.51.100.7, 203.0.113.3')).status).toBe(429);
  });

  it('global: one bucket for every client', async () => {
    expect((await http(gw.port, '/everyone/x', { localAddress: '127.0.0.4' })).status).toBe(200);
    expect((await http(gw.port, '/everyone/y', { localAddress: '127.0.0.5' })).status).toBe(200);
    expect((await http(gw.port, '/everyone/z', { localAddress: '127.0.0.6' })).status).toBe(429);
  });
});

describe('which requests a rule takes', () => {
  it('shadow rules never block and send no RateLimit headers, but count', async () => {
    const hits = upstream.hits('/shadow');
    const a = await get('/shadow/x');
    const b = await get('/shadow/x');
    const c = await get('/shadow/x');
    expect([a.status, b.status, c.status]).toEqual([200, 200, 200]);
    expect(upstream.hits('/shadow')).toBe(hits + 3);
    // a dry run changes nothing a client can see: no r=0 for well-behaved clients to throttle on
    for (const answer of [a, b, c]) {
      expect(answer.headers.ratelimit).toBeUndefined();
      expect(answer.headers['ratelimit-policy']).toBeUndefined();
    }
    expect(b.headers['retry-after']).toBeUndefined();
    const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    expect(
      metricValue(metrics, 'sluice_requests_total', { rule: 'shadowed', decision: 'shadow_denied' }),
    ).toBe(2);
    expect(metricValue(metrics, 'sluice_requests_total', { rule: 'shadowed', decision: 'allowed' })).toBe(1);
  });

  it('no rule: proxied without limit and without RateLimit headers', async () => {
    for (let i = 0; i < 5; i++) {
      const answer = await get('/free/x');
      expect(answer.status).toBe(200);
      expect(answer.headers.ratelimit).toBeUndefined();
      expect(answer.headers['ratelimit-policy']).toBeUndefined();
    }
    // a disabled rule matches nothing
    expect((await get('/disabled/x')).status).toBe(200);
    expect((await get('/disabled/x')).status).toBe(200);
  });

  it('methods: a POST-only rule leaves GET alone', async () => {
    expect((await http(gw.port, '/posts/1', { method: 'POST', body: 'a' })).status).toBe(200);
    expect((await http(gw.port, '/posts/1', { method: 'POST', body: 'a' })).status).toBe(429);
    expect((await get('/posts/1')).status).toBe(200);
    expect((await get('/posts/1')).headers.ratelimit).toBeUndefined();
  });

  it('host: a rule for one host name, port and case ignored', async () => {
    expect((await get('/hosted/x', { host: 'other.example.com' })).status).toBe(200);
    expect((await get('/hosted/x', { host: 'other.example.com' })).status).toBe(200);
    expect((await get('/hosted/x', { host: 'API.Example.com:8080' })).status).toBe(200);
    expect((await get('/hosted/x', { host: 'api.example.com' })).status).toBe(429);
  });

  it('a denied request body is never read or forwarded, and the connection is closed', async () => {
    expect((await http(gw.port, '/upload/x', { method: 'POST', body: 'first' })).status).toBe(200);
    const hits = upstream.hits('/upload');
    // announce 4000 bytes, send only the head and a few bytes: the answer must come without the body
    const answer = await rawHttp(
      gw.port,
      'POST /upload/x HTTP/1.1\r\nHost: t\r\nContent-Length: 4000\r\nContent-Type: application/octet-stream\r\n\r\nabc',
    );
    expect(answer.status).toBe(429);
    expect(answer.text.toLowerCase()).toContain('connection: close');
    expect(answer.closed).toBe(true);
    expect(upstream.hits('/upload')).toBe(hits);
  });
});

describe('forwarding', () => {
  it('forwards the normalised path with the query kept verbatim, to the longest prefix', async () => {
    const a = await get('/free/./a//b/../c?x=1&y=%2F&x=2&flag');
    expect(a.status).toBe(200);
    expect(a.json().url).toBe('/free/a/c?x=1&y=%2F&x=2&flag');
    const b = await get('/api/v2/items?q=1');
    expect(b.json().url).toBe('/api/v2/items?q=1');
    expect(upstreamV2.received.at(-1)?.url).toBe('/api/v2/items?q=1');
    const c = await get('/api/v2x/items');
    expect(upstreamV2.received.at(-1)?.url).toBe('/api/v2/items?q=1');
    expect(c.json().url).toBe('/api/v2x/items');
  });

  it('streams request bodies upstream (Content-Length and chunked)', async () => {
    const body = 'x'.repeat(3000);
    const a = await http(gw.port, '/free/body', {
      method: 'POST',
      body,
      headers: { 'content-type': 'text/plain' },
    });
    expect(a.json().bodyBytes).toBe(3000);
    const b = await rawHttp(
      gw.port,
      'PUT /free/chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n',
    );
    expect(b.status).toBe(200);
    expect(b.text).toContain('"bodyBytes":11');
  });

  it('refuses bodies over BODY_LIMIT_BYTES with 413, declared or chunked', async () => {
    const hits = upstream.hits('/free/big');
    const a = await http(gw.port, '/free/big', { method: 'POST', body: 'x'.repeat(5000) });
    expect(a.status).toBe(413);
    expect(a.json().code).toBe('SLUICE_BODY_TOO_LARGE');
    const chunk = 'y'.repeat(3000);
    const b = await rawHttp(
      gw.port,
      `POST /free/big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nbb8\r\n${chunk}\r\nbb8\r\n${chunk}\r\n0\r\n\r\n`,
    );
    expect(b.status).toBe(413);
    expect(upstream.hits('/free/big')).toBe(hits);
  });

  it('strips hop-by-hop headers both ways', async () => {
    const answer = await get(
      '/free/hop?set=keep-alive:timeout%3D99&set=connection:x-upstream-private&set=x-upstream-private:1&set=proxy-authenticate:Basic&set=x-kept:yes',
      {
        connection: 'x-secret',
        'x-secret': 'do not forward',
        'keep-alive': 'timeout=5',
        te: 'trailers',
        'proxy-authorization': 'Basic abc',
        'x-end-to-end': 'kept',
      },
    );
    expect(answer.status).toBe(200);
    const seen = answer.json<{ headers: Record<string, string> }>().headers;
    expect(seen['x-secret']).toBeUndefined();
    expect(seen['keep-alive']).toBeUndefined();
    expect(seen.te).toBeUndefined();
    expect(seen['proxy-authorization']).toBeUndefined();
    expect(seen['x-end-to-end']).toBe('kept');
    expect(answer.headers['keep-alive']).not.toContain('99');
    expect(answer.headers['proxy-authenticate']).toBeUndefined();
    expect(answer.headers['x-upstream-private']).toBeUndefined();
    expect(answer.headers['x-kept']).toBe('yes');
  });

  it("passes the upstream's header lines as it wrote them: repeated lines stay apart, an interim 103 is not relayed", async () => {
    const query =
      '?set=set-cookie:a%3D1&set=set-cookie:b%3D2&set=x-multi:one&set=x-multi:two&hint=%3C%2Fstyle.css%3E';
    for (const request of [
      // a GET: the gateway's own headers and the upstream's lines go out as one list
      `GET /free/lines${query} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n`,
      // a POST still sending its body when admitted: its id is on Node's response already
      `POST /free/lines${query} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello`,
    ]) {
      const answer = await rawHttp(gw.port, request);
      expect(answer.status, request).toBe(200);
      const head = answer.text.slice(0, answer.text.indexOf('\r\n\r\n')).toLowerCase();
      expect(head.startsWith('http/1.1 200'), head).toBe(true);
      expect(head.match(/^set-cookie: .*$/gm)).toEqual(['set-cookie: a=1', 'set-cookie: b=2']);
      expect(head.match(/^x-multi: .*$/gm)).toEqual(['x-multi: one', 'x-multi: two']);
      expect(head.match(/^x-request-id: .*$/gm)).toHaveLength(1);
      expect(answer.text).not.toContain('103');
    }
  });

  it('the upstream cannot override the gateway RateLimit headers of a limited request', async () => {
    const answer = await get('/everyone/hdr?set=ratelimit:fake&set=ratelimit-policy:fake');
    expect(answer.status).toBe(429);
    const free = await get('/free/hdr?set=ratelimit:theirs');
    expect(free.headers.ratelimit).toBe('theirs');
  });

  it('an unreachable upstream is 502, a silent one 504, both JSON and counted', async () => {
    const dead = await get('/dead/x');
    expect(dead.status).toBe(502);
    expect(dead.json()).toMatchObject({
      statusCode: 502,
      error: 'Bad Gateway',
      code: 'SLUICE_UPSTREAM_UNREACHABLE',
    });
    const slow = await get('/slow/x?ms=3000');
    expect(slow.status).toBe(504);
    expect(slow.json()).toMatchObject({ statusCode: 504, code: 'SLUICE_UPSTREAM_TIMEOUT' });
    const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    expect(
      metricValue(metrics, 'sluice_upstream_errors_total', { upstream: '/dead', kind: 'unreachable' }),
    ).toBe(1);
    expect(metricValue(metrics, 'sluice_upstream_errors_total', { upstream: '/slow', kind: 'timeout' })).toBe(
      1,
    );
  });

  it('answers an upstream 503 as is, without retrying it', async () => {
    const hits = upstream.hits('/free/unavailable');
    const answer = await get('/free/unavailable?status=503');
    expect(answer.status).toBe(503);
    expect(upstream.hits('/free/unavailable')).toBe(hits + 1);
  });
});

describe('prefixes and 404', () => {
  let orders: RunningGateway;
  beforeAll(async () => {
    orders = await startGateway({
      UPSTREAMS: `/orders=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      REDIS_URL,
      REDIS_KEY_PREFIX: uniqueKeyPrefix('orders'),
    });
  });
  afterAll(() => orders?.close());

  it('a prefix takes whole segments and is kept in the forwarded path; no prefix → 404 JSON', async () => {
    const exact = await http(orders.port, '/orders');
    expect(exact.status).toBe(200);
    expect(exact.json().url).toBe('/orders');
    const deep = await http(orders.port, '/orders/7/items?a=b');
    expect(deep.json().url).toBe('/orders/7/items?a=b');
    const hits = upstream.hits();
    for (const path of ['/ordersx', '/', '/other/orders', '/Orders/1']) {
      const answer = await http(orders.port, path);
      expect(answer.status, path).toBe(404);
      expect(answer.json()).toMatchObject({
        statusCode: 404,
        error: 'Not Found',
        code: 'SLUICE_NO_UPSTREAM',
      });
    }
    // normalised before routing: `..` cannot climb out of a prefix into another, nor into one
    const climbed = await http(orders.port, '/orders/../secret');
    expect(climbed.status).toBe(404);
    // an unsafe path is 400 even where no upstream would take it
    const unsafe = await http(orders.port, '/nowhere%2Fx');
    expect(unsafe.status).toBe(400);
    expect(unsafe.json()).toMatchObject({ code: 'SLUICE_BAD_PATH', reason: 'PATH_ENCODED_SLASH' });
    const into = await http(orders.port, '/x/../orders/1');
    expect(into.json().url).toBe('/orders/1');
    expect(upstream.hits()).toBe(hits + 1);
  });
});

describe('request smuggling and size limits (raw sockets)', () => {
  const smuggled = [
    [
      'Content-Length with Transfer-Encoding',
      'POST /free/s HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /free/smuggled HTTP/1.1\r\nHost: t\r\n\r\n',
    ],
    [
      'two different Content-Length',
      'POST /free/s HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabcGET /free/smuggled HTTP/1.1\r\n\r\n',
    ],
    ['a list in Content-Length', 'POST /free/s HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 3\r\n\r\nabc'],
    ['a sign in Content-Length', 'POST /free/s HTTP/1.1\r\nHost: t\r\nContent-Length: +3\r\n\r\nabc'],
    [
      'an obfuscated Transfer-Encoding',
      'POST /free/s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n',
    ],
    [
      'a space before the colon',
      'POST /free/s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n',
    ],
    [
      'chunked not last',
      'POST /free/s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n',
    ],
    ['a bare LF in a header', 'GET /free/s HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n'],
  ] as const;

  for (const [what, raw] of smuggled) {
    it(`rejects ${what} with 400 and forwards nothing`, async () => {
      const hits = upstream.hits('/free/s');
      const answer = await rawHttp(gw.port, raw);
      expect(answer.status).toBe(400);
      expect(answer.text).not.toContain('HTTP/1.1 200');
      // a request sent after it reaches the upstream: anything the refused bytes had smuggled would
      // have been forwarded before (at parse time, ahead of the 400), so only this one is counted
      expect((await http(gw.port, '/free/s')).status).toBe(200);
      expect(upstream.hits('/free/s')).toBe(hits + 1);
    });
  }

  it('answers 431 to a header section over MAX_HEADER_BYTES', async () => {
    const answer = await rawHttp(
      gw.port,
      `GET /free/h HTTP/1.1\r\nHost: t\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expect(answer.status).toBe(431);
  });
});

describe('rules cache and admin listener', () => {
  it('enforces a rule change within one refresh (RULES_REFRESH every second)', async () => {
    expect((await get('/change/x')).status).toBe(200);
    expect((await get('/change/x')).status).toBe(429);
    const versionBefore = await api.snapshotVersion();
    await api.updateRule(changeRule.id, {
      name: 'change',
      match: { path: '/change/**' },
      limit: { capacity: 50, refill: 1, period: '1h' },
    });
    const changedAt = Date.now();
    await waitFor(
      async () => (await get('/change/fresh')).headers['ratelimit-policy'] === '"change";q=50;w=180000',
      5_000,
      'the new rule',
    );
    // one refresh period (1 s) plus the request itself; generous for a loaded machine
    expect(Date.now() - changedAt).toBeLessThan(2_500);
    const ready = (await (await fetch(`${gw.adminUrl}/readyz`)).json()) as { rulesVersion: number };
    expect(ready.rulesVersion).toBeGreaterThan(versionBefore);
    // a rule created after start is enforced as well
    await api.createRule({
      name: 'late',
      match: { path: '/late/**' },
      limit: { capacity: 1, refill: 1, period: '1h' },
    });
    await waitFor(async () => (await get('/late/x')).status === 429, 5_000, 'the new rule to deny');
  });

  it('serves /healthz, /readyz and Prometheus /metrics on the admin port only', async () => {
    expect((await fetch(`${gw.adminUrl}/healthz`)).status).toBe(200);
    const ready = await fetch(`${gw.adminUrl}/readyz`);
    expect(ready.status).toBe(200);
    const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    expect(metricValue(text, 'sluice_requests_total', { rule: 'burst', decision: 'allowed' })).toBe(4);
    expect(metricValue(text, 'sluice_requests_total', { rule: 'burst', decision: 'denied' })).toBe(2);
    expect(metricValue(text, 'sluice_rules_version')).toBe(await api.snapshotVersion());
    expect(metricValue(text, 'sluice_rules_age_seconds')).toBeLessThan(5);
    // every failure reason is there from the start, at 0
    expect(metricValue(text, 'sluice_rules_refresh_failures_total', { reason: 'unreachable' })).toBe(0);
    expect(metricValue(text, 'sluice_denials_cached_total')).toBeGreaterThanOrEqual(1);
    expect(metricValue(text, 'sluice_decision_duration_seconds_count', { store: 'redis' })).toBeGreaterThan(
      10,
    );
    expect(metricValue(text, 'sluice_store_breaker_state')).toBe(0);
    // the proxy port serves none of it
    expect((await get('/metrics')).json().url).toBe('/metrics');
  });
});

describe('client identity behind a trusted proxy', () => {
  let trusted: RunningGateway;
  beforeAll(async () => {
    trusted = await startGateway({
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      REDIS_URL,
      REDIS_KEY_PREFIX: uniqueKeyPrefix('trusted'),
      TRUST_PROXY: 'loopback',
    });
  });
  afterAll(() => trusted?.close());

  const via = (forwardedFor: string) =>
    http(trusted.port, '/perip/x', { headers: { 'x-forwarded-for': forwardedFor } });

  it('uses X-Forwarded-For from a trusted proxy', async () => {
    expect((await via('203.0.113.10')).status).toBe(200);
    expect((await via('203.0.113.10')).status).toBe(429);
    expect((await via('203.0.113.11')).status).toBe(200);
  });

  it('keys IPv6 clients by their /64', async () => {
    expect((await via('2001:db8:1:2::1')).status).toBe(200);
    expect((await via('2001:db8:1:2:ffff:ffff:ffff:ffff')).status).toBe(429);
    expect((await via('2001:0db8:0001:0002:0:0:0:9')).status).toBe(429);
    expect((await via('2001:db8:1:3::1')).status).toBe(200);
    // IPv4-mapped IPv6 is the IPv4 client
    expect((await via('203.0.113.20')).status).toBe(200);
    expect((await via('::ffff:203.0.113.20')).status).toBe(429);
  });
});

describe('without REDIS_URL', () => {
  let solo: RunningGateway;
  beforeAll(async () => {
    solo = await startGateway({
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
    });
  });
  afterAll(() => solo?.close());

  it('limits with the in-process store, same arithmetic and headers', async () => {
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await http(solo.port, '/debt/solo'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    expect(answers[0]!.headers.ratelimit).toBe(`"debt";r=2;t=1${pk}`);
    expect(answers[2]!.headers['retry-after']).toBe('7');
    const text = await (await fetch(`${solo.adminUrl}/metrics`)).text();
    expect(metricValue(text, 'sluice_decision_duration_seconds_count', { store: 'memory' })).toBe(3);
  });
});

describe('Expect: 100-continue', () => {
  it('invites the body only once the request is admitted', async () => {
    const head = (path: string) =>
      `POST ${path} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`;
    // the upload rule's only token is spent (earlier test): denied without a 100
    const denied = await rawHttp(gw.port, head('/upload/expect'));
    expect(denied.status).toBe(429);
    expect(denied.text).not.toContain('100 Continue');
    // no rule: 100 first, then the body goes through
    const admitted = await new Promise<string>((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: gw.port }, () => socket.write(head('/free/expect')));
      let text = '';
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        if (text.startsWith('HTTP/1.1 100 Continue\r\n\r\n') && !text.includes('200')) socket.write('hello');
      });
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
    expect(admitted).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK/);
    expect(admitted).toContain('"bodyBytes":5');
  });
});
