/**
 * Request lines and heads (SPEC §4, turn 3), on raw sockets against a real gateway: a request line
 * without an HTTP version gets 400 and CONNECT 405, each with the JSON error body, neither proxied;
 * more header lines than MAX_HEADER_COUNT get 431 (never a silent drop of the rest); and
 * UPSTREAM_TIMEOUT_MS is kept to within a few percent.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http, rawHttp } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const UPSTREAM_TIMEOUT_MS = 1_000;

/** An upstream that records every request it gets; `/slow…` answers after `?ms=`. */
interface RecordingUpstream {
  url: string;
  received: IncomingMessage[];
  close(): Promise<void>;
}

async function startRecordingUpstream(): Promise<RecordingUpstream> {
  const received: IncomingMessage[] = [];
  const server: Server = createServer((req, res) => {
    received.push(req);
    req.resume();
    const url = new URL(req.url ?? '/', 'http://upstream');
    setTimeout(
      () => {
        if (!res.destroyed) res.end('ok');
      },
      url.pathname.startsWith('/slow') ? Number(url.searchParams.get('ms') ?? 0) : 0,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

let api: RulesApi;
let upstream: RecordingUpstream;
let gw: RunningGateway;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startRecordingUpstream()]);
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: uniqueKeyPrefix('request-lines'),
    UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS),
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

const reached = (path: string) => upstream.received.filter((r) => r.url?.startsWith(path)).length;

/** The JSON body of a raw response. */
function bodyOf(text: string): Record<string, unknown> {
  return JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>;
}

describe('request lines the gateway never proxies', () => {
  it('a request line without an HTTP version (HTTP/0.9 style): 400 with the JSON error body, not proxied', async () => {
    const answer = await rawHttp(gw.port, 'GET /r/zz\r\n\r\n');
    expect(answer.status).toBe(400);
    expect(answer.text).toMatch(/content-type: application\/json/i);
    expect(answer.text).toMatch(/x-request-id: \S+/i);
    expect(bodyOf(answer.text)).toMatchObject({
      statusCode: 400,
      code: 'SLUICE_BAD_REQUEST',
      reason: 'HTTP_VERSION_MISSING',
    });
    expect(answer.closed).toBe(true);
    expect(reached('/r/zz')).toBe(0);
  });

  it('CONNECT host:port: 405 with the JSON error body and Allow, the connection closed, nothing proxied', async () => {
    const before = upstream.received.length;
    const answer = await rawHttp(
      gw.port,
      'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n',
    );
    expect(answer.status).toBe(405);
    expect(answer.text).toMatch(/allow: DELETE, GET, HEAD, PATCH, POST, PUT, OPTIONS/i);
    expect(answer.text).toMatch(/x-request-id: \S+/i);
    expect(bodyOf(answer.text)).toMatchObject({ statusCode: 405, code: 'SLUICE_METHOD_NOT_ALLOWED' });
    expect(answer.closed).toBe(true);
    expect(upstream.received.length).toBe(before);
  });
});

describe('MAX_HEADER_COUNT (default 200)', () => {
  /** A GET with Host and `extra` more short header lines (short enough for MAX_HEADER_BYTES). */
  const withHeaders = (path: string, extra: number) => {
    let head = `GET ${path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n`;
    for (let i = 0; i < extra; i++) head += `h${i}:1\r\n`;
    return `${head}\r\n`;
  };

  it.each([201, 2_500])('%d header lines: 431 SLUICE_TOO_MANY_HEADERS, not proxied', async (lines) => {
    const answer = await rawHttp(gw.port, withHeaders(`/many/${lines}`, lines - 2));
    expect(answer.status).toBe(431);
    expect(bodyOf(answer.text)).toMatchObject({ statusCode: 431, code: 'SLUICE_TOO_MANY_HEADERS' });
    expect(reached(`/many/${lines}`)).toBe(0);
  });

  it('200 header lines are proxied, every one of them', async () => {
    const answer = await rawHttp(gw.port, withHeaders('/many/200', 198));
    expect(answer.status).toBe(200);
    const got = upstream.received.find((r) => r.url === '/many/200');
    expect(got?.headers.h0).toBe('1');
    expect(got?.headers.h197).toBe('1');
  });
});

describe('UPSTREAM_TIMEOUT_MS', () => {
  it('an upstream that sends nothing gets the client a 504 within a few percent of UPSTREAM_TIMEOUT_MS (1 s), not half a second late', async () => {
    const elapsed: number[] = [];
    for (let i = 0; i < 4; i++) {
      const startedAt = performance.now();
      // a request with a body too: its time starts once the body is forwarded
      const answer = await http(gw.port, `/slow/${i}?ms=${UPSTREAM_TIMEOUT_MS * 4}`, {
        method: i % 2 === 0 ? 'GET' : 'POST',
        body: i % 2 === 0 ? undefined : 'a small body',
      });
      elapsed.push(performance.now() - startedAt);
      expect(answer.status).toBe(504);
    }
    for (const ms of elapsed) {
      expect(ms).toBeGreaterThanOrEqual(UPSTREAM_TIMEOUT_MS);
      // undici's half-second timer tick made this ~1,500 ms; the margin is for a busy test machine
      expect(ms).toBeLessThan(UPSTREAM_TIMEOUT_MS * 1.15);
    }
  }, 30_000);
});
