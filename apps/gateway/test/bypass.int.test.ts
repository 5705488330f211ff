/**
 * Path-bypass corpus: after the one token of `/admin/**` is spent, every spelling of an /admin path
 * must be denied (429: it was counted against the rule) or refused (400: it cannot be normalised
 * safely). None may reach the upstream, as a request or as a WebSocket handshake. Targets go over a
 * raw socket, exactly as written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BYPASS_CORPUS as CORPUS } from './helpers/bypass-corpus.js';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http, rawHttp } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  await api.createRule({
    name: 'admin',
    match: { path: '/admin/**' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  });
  await api.createRule({
    name: 'reports',
    match: { path: '/reports/**', caseInsensitive: true },
    limit: { capacity: 1, refill: 1, period: '1h' },
  });
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_KEY_PREFIX: uniqueKeyPrefix('bypass'),
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

describe('path-bypass corpus', () => {
  it(`denies or refuses all ${CORPUS.length} spellings of /admin once its token is spent`, async () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(25);
    expect((await http(gw.port, '/admin/x')).status).toBe(200);
    const hitsAfterFirst = upstream.hits();
    const results: Array<{ target: string; status: number; expected: number }> = [];
    for (const [target, expected] of CORPUS) {
      for (const method of ['GET', 'POST']) {
        const answer = await rawHttp(
          gw.port,
          Buffer.from(
            `${method} ${target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
            'latin1',
          ),
        );
        results.push({ target: `${method} ${JSON.stringify(target)}`, status: answer.status, expected });
      }
    }
    const wrong = results.filter((r) => r.status !== r.expected);
    expect(wrong).toEqual([]);
    // zero bypasses: nothing after the first request reached the upstream
    expect(upstream.hits()).toBe(hitsAfterFirst);
  });

  it('denies or refuses the same spellings as WebSocket handshakes (Upgrade: websocket), none reaching the upstream', async () => {
    const hits = upstream.hits();
    const wrong: string[] = [];
    for (const [target, expected] of CORPUS) {
      const answer = await rawHttp(
        gw.port,
        Buffer.from(
          `GET ${target} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
            'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
          'latin1',
        ),
      );
      if (answer.status !== expected)
        wrong.push(`${JSON.stringify(target)}: ${answer.status}, expected ${expected}`);
    }
    expect(wrong).toEqual([]);
    expect(upstream.hits()).toBe(hits);
  });

  it('still proxies paths that only look alike', async () => {
    const hits = upstream.hits();
    // `/Admin/x`: rules are case-sensitive unless they say `match.caseInsensitive` (tested below)
    for (const path of ['/administrator', '/Admin/x', '/public/admin', '/adm%25in/x']) {
      const answer = await http(gw.port, path);
      expect(answer.status, path).toBe(200);
    }
    expect(upstream.hits()).toBe(hits + 4);
    expect(upstream.received.at(-1)?.url).toBe('/adm%25in/x');
  });

  it('counts every case of a caseInsensitive rule against it (for upstreams that ignore case)', async () => {
    const hits = upstream.hits();
    expect((await http(gw.port, '/reports/q1')).status).toBe(200);
    for (const path of ['/REPORTS/q1', '/Reports/Q1', '/rePorts/x']) {
      expect((await http(gw.port, path)).status, path).toBe(429);
    }
    expect(upstream.hits()).toBe(hits + 1);
  });
});
