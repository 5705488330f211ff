/**
 * What reaches an upstream, and what costs a token, when the request is spelled to slip past a rule:
 * host spellings (routing and matching must see one host), methods no route takes, and forwarded
 * client addresses with ports or leading zeros. Hand-made requests go over a raw socket, as written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http, rawHttp } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let hostUpstream: Upstream;
let otherUpstream: Upstream;
/** UPSTREAMS names one host only: every other host is 404 */
let hostOnly: RunningGateway;
/** a host entry for /orders, a catch-all without host; trusts one proxy hop */
let mixed: RunningGateway;
const REDIS_URL = 'redis://127.0.0.1:6379';
const HOUR = '1h';

beforeAll(async () => {
  [api, hostUpstream, otherUpstream] = await Promise.all([startRulesApi(), startUpstream(), startUpstream()]);
  await api.createRule({
    name: 'api-admin',
    match: { host: 'api.example.com', path: '/admin/**' },
    limit: { capacity: 1, refill: 1, period: HOUR },
  });
  await api.createRule({
    name: 'webdav',
    match: { path: '/dav/**' },
    limit: { capacity: 1, refill: 1, period: HOUR },
  });
  await api.createRule({
    name: 'per-client',
    match: { path: '/xff/**' },
    limit: { capacity: 1, refill: 1, period: HOUR },
  });
  const common = { RULES_API_URL: api.url, RULES_API_TOKEN: READ_TOKEN, REDIS_URL };
  [hostOnly, mixed] = await Promise.all([
    startGateway({
      ...common,
      UPSTREAMS: `api.example.com/=${hostUpstream.url}`,
      REDIS_KEY_PREFIX: uniqueKeyPrefix('admission-host'),
    }),
    startGateway({
      ...common,
      UPSTREAMS: `API.Example.com./orders=${hostUpstream.url},/=${otherUpstream.url}`,
      REDIS_KEY_PREFIX: uniqueKeyPrefix('admission-mixed'),
      TRUST_PROXY: '1',
    }),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([hostOnly?.close(), mixed?.close()]);
  await Promise.all([api?.close(), hostUpstream?.close(), otherUpstream?.close()]);
});

const request = (head: string) => Buffer.from(`${head}\r\n\r\n`, 'latin1');
const bodyOf = (text: string) => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));

describe('host rules cannot be bypassed by spelling the host', () => {
  it('every spelling of a spent host rule is denied, refused, or routed nowhere', async () => {
    const first = await rawHttp(
      hostOnly.port,
      request('GET /admin/x HTTP/1.1\r\nHost: api.example.com\r\nConnection: close'),
    );
    expect(first.status).toBe(200);
    const hits = hostUpstream.hits();

    const cases: Array<[string, string, number, string?]> = [
      ['trailing dot', 'GET /admin/x HTTP/1.1\r\nHost: api.example.com.', 429],
      ['case and port', 'GET /admin/x HTTP/1.1\r\nHost: API.Example.COM:8080', 429],
      [
        'two Host headers',
        'GET /admin/x HTTP/1.1\r\nHost: other\r\nHost: api.example.com',
        400,
        'HOST_DUPLICATE',
      ],
      [
        'Host and host',
        'GET /admin/x HTTP/1.1\r\nHost: api.example.com\r\nhost: api.example.com',
        400,
        'HOST_DUPLICATE',
      ],
      ['userinfo', 'GET /admin/x HTTP/1.1\r\nHost: u@api.example.com', 400, 'HOST_USERINFO'],
      ['not a host name', 'GET /admin/x HTTP/1.1\r\nHost: api.example.com..', 400, 'HOST_INVALID'],
      ['empty Host', 'GET /admin/x HTTP/1.1\r\nHost: ', 404],
      ['HTTP/1.0 without Host', 'GET /admin/x HTTP/1.0', 404],
      ['HTTP/1.1 without Host', 'GET /admin/x HTTP/1.1', 400, 'HOST_MISSING'],
      ['another host', 'GET /admin/x HTTP/1.1\r\nHost: other.example.com', 404],
    ];
    const wrong: string[] = [];
    for (const [name, head, status, reason] of cases) {
      const answer = await rawHttp(hostOnly.port, request(`${head}\r\nConnection: close`));
      const body = answer.status === 0 ? {} : bodyOf(answer.text);
      const code = { 400: 'SLUICE_BAD_HOST', 404: 'SLUICE_NO_UPSTREAM' }[status];
      if (
        answer.status !== status ||
        (reason !== undefined && body.reason !== reason) ||
        (code !== undefined && body.code !== code)
      ) {
        wrong.push(`${name}: ${answer.status} ${body.code ?? ''} ${body.reason ?? ''}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(hostUpstream.hits()).toBe(hits);
  });

  it('routes by the normalised host: a host entry takes only its host, entries without a host the rest', async () => {
    const route = async (host: string, path: string) => {
      const before = [hostUpstream.hits(), otherUpstream.hits()];
      const answer = await http(mixed.port, path, { headers: { host } });
      expect(answer.status, `${host}${path}`).toBe(200);
      if (hostUpstream.hits() > before[0]!) return 'host';
      if (otherUpstream.hits() > before[1]!) return 'other';
      return 'none';
    };
    expect(await route('api.example.com', '/orders/1')).toBe('host');
    expect(await route('API.EXAMPLE.COM.:443', '/orders')).toBe('host');
    expect(await route('api.example.com', '/ordersx')).toBe('other');
    expect(await route('api.example.com', '/catalog')).toBe('other');
    expect(await route('shop.example.com', '/orders/1')).toBe('other');
    // the host was routed on its normalised spelling; the upstream hears its own host, as before
    expect(hostUpstream.received.at(-1)?.headers.host).toBe(new URL(hostUpstream.url).host);
  });
});

describe('a request the router refuses costs nothing', () => {
  it('PROPFIND is answered 405 before any token is charged', async () => {
    const propfind = await http(mixed.port, '/dav/file', { method: 'PROPFIND' });
    expect(propfind.status).toBe(405);
    expect(propfind.json().code).toBe('SLUICE_METHOD_NOT_ALLOWED');
    expect(propfind.headers.ratelimit).toBeUndefined();
    // the one token is still there
    expect((await http(mixed.port, '/dav/file')).status).toBe(200);
    expect((await http(mixed.port, '/dav/file')).status).toBe(429);
  });

  it('a method to a host no entry takes is 404, to a host an entry takes 405', async () => {
    const other = await http(hostOnly.port, '/x', {
      method: 'PROPFIND',
      headers: { host: 'other.example.com' },
    });
    expect(other.status).toBe(404);
    const known = await http(hostOnly.port, '/x', {
      method: 'PROPFIND',
      headers: { host: 'api.example.com' },
    });
    expect(known.status).toBe(405);
  });
});

describe('X-Forwarded-For from a trusted proxy', () => {
  const from = (xff: string, path = '/xff/a') =>
    http(mixed.port, path, { headers: { 'x-forwarded-for': xff } });

  it('one client whatever the port a proxy appends', async () => {
    expect((await from('5.5.5.5')).status).toBe(200);
    expect((await from('5.5.5.5:1234')).status).toBe(429);
    expect((await from('9.9.9.9, 5.5.5.5:80')).status).toBe(429);
    expect((await from('[2001:db8:1:2::1]:443', '/xff/b')).status).toBe(200);
    expect((await from('2001:db8:1:2::99', '/xff/b')).status).toBe(429);
  });

  it('an address that is not canonical is refused with 400, never keyed as a new client', async () => {
    const hits = otherUpstream.hits();
    for (const xff of ['005.005.005.005', '5.5.5', '0x5.5.5.5', 'unknown', '5.5.5.5:port', '[5.5.5.5]:1']) {
      const answer = await from(xff);
      expect(answer.status, xff).toBe(400);
      expect(answer.json().code, xff).toBe('SLUICE_BAD_FORWARDED_FOR');
    }
    expect(otherUpstream.hits()).toBe(hits);
  });
});
