/**
 * Path-bypass corpus: after the one token of `/admin/**` is spent, every spelling of an /admin path
 * must be denied (429: it was counted against the rule) or refused (400: it cannot be normalised
 * safely). None may reach the upstream, as a request or as a WebSocket handshake. Targets go over a
 * raw socket, exactly as written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

/** [request-target as sent, expected status] */
const CORPUS: ReadonlyArray<readonly [string, 400 | 429]> = [
  ['/admin', 429],
  ['/admin/', 429],
  ['/admin/x', 429],
  ['/admin/x?next=/public', 429],
  ['//admin/x', 429],
  ['///admin///x', 429],
  ['/admin//x', 429],
  ['/./admin/x', 429],
  ['/./././admin', 429],
  ['/admin/./x', 429],
  ['/public/../admin/x', 429],
  ['/x/y/../../admin/z', 429],
  ['/admin/x/..', 429],
  ['/admin/%2e%2e/admin/x', 429],
  ['/%61dmin/x', 429],
  ['/adm%69n/x', 429],
  ['/%61%64%6D%69%6E/x', 429],
  ['/%2e/admin/x', 429],
  ['/x/%2e%2e/admin/x', 429],
  ['/x/%2E%2E/admin/x', 429],
  ['/x/.%2e/admin/x', 429],
  ['/x/%2e./admin', 429],
  ['/%2e%2e/admin', 400],
  ['/../admin', 400],
  ['/admin%2Fx', 400],
  ['/admin%2fx', 400],
  ['/x/..%2Fadmin', 400],
  ['/%2e%2e%2fadmin', 400],
  ['/admin\\x', 400],
  ['/x/..\\admin', 400],
  ['/x/%5C../admin', 400],
  ['/admin/x%00', 400],
  ['/admin%00/x', 400],
  ['/admin%09/x', 400],
  ['/admin\u0000x', 400],
  ['/admin/x#frag', 400],
  ['/admin%ZZ/x', 400],
  ['/%u0061dmin/x', 400],
  ['/admin%', 400],
  ['http://evil.example/admin/x', 400],
  ['HTTP://127.0.0.1/./admin/x', 400],
  ['*', 400],
  // spellings that some upstreams read as /admin (docs/paths.md): refused rather than guessed at
  ['/admin;x=1', 400],
  ['/admin;/x', 400],
  ['/admin%3Bx=1/x', 400],
  ['/admin./x', 400],
  ['/admin%2e/x', 400],
  ['/admin%20/x', 400],
  ['/foo/%252e%252e/admin/x', 400],
  ['/%2561dmin/x', 400],
  ['/foo/%EF%BC%8E%EF%BC%8E/admin/x', 400],
  ['/admin%EF%BC%8Fx', 400],
  ['/%C0%AE%C0%AE/admin/x', 400],
];

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
