/**
 * Long and abandoned exchanges on the real Redis (docs/lifecycle.md): a streamed response is relayed
 * as it arrives; a concurrency slot is renewed for as long as its exchange runs, so a stream lasting
 * three slot lifetimes still keeps `max` at the upstream; a client that goes away gets its upstream
 * request aborted, and its slot back only once that abort is done, so aborting clients never put more
 * than `max` requests at the upstream. A request no rule limits is aborted upstream when its client
 * goes away too, and a client that reads slowly slows the upstream down instead of the gateway
 * buffering the difference. Measured at the upstream, per client key.
 *
 * Slots here live UPSTREAM_TIMEOUT_MS (400 ms) + 200 ms (the margin is shortened for the test; it is
 * 5 s in production), so a renewal comes every 200–300 ms.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';

const SLOT_LIFETIME_MS = 400 + 200;

/**
 * `/sse/...?events=&everyMs=`: server-sent events, one every `everyMs`; `/slow/...?ms=`: one answer
 * after `ms`. Per client key (`x-api-key`): requests in flight, the most at once, and requests whose
 * connection closed before their answer was sent (aborted by the gateway).
 */
interface MeasuringUpstream {
  url: string;
  inFlight(key: string): number;
  mostInFlight(key: string): number;
  received(key: string): number;
  abandoned(key: string): number;
  /** ms from the arrival of the key's last abandoned request to its connection closing */
  abandonedAfterMs(key: string): number | undefined;
  /** body bytes the upstream has written so far (`/big/...`) */
  written(key: string): number;
  close(): Promise<void>;
}

async function startMeasuringUpstream(): Promise<MeasuringUpstream> {
  const count = (map: Map<string, number>, key: string, by = 1) => map.set(key, (map.get(key) ?? 0) + by);
  const current = new Map<string, number>();
  const most = new Map<string, number>();
  const received = new Map<string, number>();
  const abandoned = new Map<string, number>();
  const written = new Map<string, number>();
  const abandonedAfterMs = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream');
    const key = String(req.headers['x-api-key']);
    const arrivedAt = performance.now();
    count(received, key);
    count(current, key);
    most.set(key, Math.max(most.get(key) ?? 0, current.get(key)!));
    let timer: NodeJS.Timeout | undefined;
    res.on('close', () => {
      clearInterval(timer);
      count(current, key, -1);
      if (!res.writableFinished) {
        count(abandoned, key);
        abandonedAfterMs.set(key, performance.now() - arrivedAt);
      }
    });
    req.resume();
    if (url.pathname.startsWith('/sse')) {
      let left = Number(url.searchParams.get('events') ?? 5);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
      const send = () => {
        res.write(`data: ${left}\n\n`);
        if (--left === 0) res.end();
      };
      const everyMs = Number(url.searchParams.get('everyMs') ?? 100);
      // `?firstMs=`: the first event comes sooner than the others
      const firstMs = Number(url.searchParams.get('firstMs') ?? everyMs);
      timer = setTimeout(() => {
        send();
        if (left > 0) timer = setInterval(send, everyMs);
      }, firstMs);
      return;
    }
    if (url.pathname.startsWith('/big')) {
      // `?mib=`: that many MiB, written only as fast as the connection takes them
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let left = Number(url.searchParams.get('mib') ?? 1) * 16;
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': left * chunk.length,
      });
      const pump = () => {
        while (left > 0) {
          left--;
          count(written, key, chunk.length);
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      pump();
      return;
    }
    timer = setTimeout(() => res.end('done'), Number(url.searchParams.get('ms') ?? 0));
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    inFlight: (key) => current.get(key) ?? 0,
    mostInFlight: (key) => most.get(key) ?? 0,
    received: (key) => received.get(key) ?? 0,
    abandoned: (key) => abandoned.get(key) ?? 0,
    written: (key) => written.get(key) ?? 0,
    abandonedAfterMs: (key) => abandonedAfterMs.get(key),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

let api: RulesApi;
let upstream: MeasuringUpstream;
let gw: RunningGateway;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startMeasuringUpstream()]);
  for (const [name, path, max] of [
    ['streams', '/sse/**', 2],
    ['slow', '/slow/**', 1],
  ] as const) {
    await api.createRule({
      name,
      match: { path },
      limits: [
        { name: 'inflight', client: { by: 'header', name: 'x-api-key' }, algorithm: 'concurrency', max },
      ],
    } as unknown as RuleBody);
  }
  gw = await startGateway(
    {
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      REDIS_URL: 'redis://127.0.0.1:6379',
      REDIS_KEY_PREFIX: uniqueKeyPrefix('streams'),
      UPSTREAM_TIMEOUT_MS: '400',
      // a slow Redis on a busy machine must not hand decisions to the local fallback (it knows no slots)
      STORE_TIMEOUT_MS: '2000',
      SHUTDOWN_TIMEOUT_MS: '500',
    },
    { slotLeaseMarginMs: 200 },
  );
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

interface Streamed {
  status: number;
  contentType: string | undefined;
  /** ms from the request to each chunk of the body, and to its end */
  chunkAtMs: number[];
  endAtMs: number;
}

/** A GET whose body chunks are timed as they arrive. */
function stream(path: string, key: string): Promise<Streamed> {
  return new Promise((resolve, reject) => {
    const sentAtMs = performance.now();
    const req = httpRequest(
      { host: '127.0.0.1', port: gw.port, path, headers: { 'x-api-key': key }, agent: false },
      (res) => {
        const chunkAtMs: number[] = [];
        res.on('data', () => chunkAtMs.push(performance.now() - sentAtMs));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: res.headers['content-type'],
            chunkAtMs,
            endAtMs: performance.now() - sentAtMs,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('streamed responses', () => {
  it('server-sent events reach the client as they are sent, not when the stream ends', async () => {
    const answer = await stream('/sse/feed?events=5&everyMs=150', 'sse-reader');
    expect(answer.status).toBe(200);
    expect(answer.contentType).toBe('text/event-stream');
    expect(answer.endAtMs).toBeGreaterThanOrEqual(700);
    // the first event arrived long before the last was sent
    expect(answer.chunkAtMs[0]).toBeLessThan(answer.endAtMs - 400);
    expect(answer.chunkAtMs.length).toBeGreaterThanOrEqual(3);
  });

  it('streams lasting 3 slot lifetimes keep max: the upstream never has more than 2 of the client', async () => {
    const key = 'long-streams';
    const events = Math.ceil((3 * SLOT_LIFETIME_MS) / 100) + 2;
    const running = [
      stream(`/sse/a?events=${events}&everyMs=100`, key),
      stream(`/sse/b?events=${events}&everyMs=100`, key),
    ];
    await waitFor(async () => upstream.inFlight(key) === 2, 2_000, 'the two streams');
    const startedAtMs = performance.now();
    // a third stream is asked for over and over while both run, past their slots' first expiry
    const statuses: number[] = [];
    while (performance.now() - startedAtMs < 3 * SLOT_LIFETIME_MS - 200) {
      statuses.push((await stream('/sse/c?events=1&everyMs=10', key)).status);
      await sleep(50);
    }
    expect(statuses.length).toBeGreaterThan(10);
    expect(new Set(statuses)).toEqual(new Set([429]));
    expect(upstream.mostInFlight(key)).toBe(2);
    const done = await Promise.all(running);
    expect(done.map((answer) => answer.status)).toEqual([200, 200]);
    expect(Math.min(...done.map((answer) => answer.endAtMs))).toBeGreaterThan(3 * SLOT_LIFETIME_MS);
    // both ended: their slots are back at once
    await gw.settled();
    expect((await stream('/sse/d?events=1&everyMs=10', key)).status).toBe(200);
  }, 20_000);
});

describe('a silent stream', () => {
  /** The status, the events received, and how the response ended ('' for a complete one). */
  const read = (path: string, key: string) =>
    new Promise<{ status: number; events: number; error: string; body: string }>((resolve) => {
      const req = httpRequest(
        { host: '127.0.0.1', port: gw.port, path, headers: { 'x-api-key': key }, agent: false },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            body += chunk;
          });
          const events = () => body.match(/^data: /gm)?.length ?? 0;
          res.on('error', (error) =>
            resolve({ status: res.statusCode ?? 0, events: events(), error: error.message, body }),
          );
          res.on('end', () => resolve({ status: res.statusCode ?? 0, events: events(), error: '', body }));
        },
      );
      req.on('error', (error) => resolve({ status: 0, events: 0, error: error.message, body: '' }));
      req.end();
    });

  it('sending nothing for longer than UPSTREAM_TIMEOUT_MS (400 ms here, checked about every second): 504 before the first event, cut after it; the slot comes back', async () => {
    const key = 'silent';
    const before = await read('/sse/gap?events=2&everyMs=2500', key);
    expect(before.status).toBe(504);
    expect(JSON.parse(before.body)).toMatchObject({ code: 'SLUICE_UPSTREAM_TIMEOUT' });
    const after = await read('/sse/gap?events=2&firstMs=10&everyMs=2500', key);
    expect(after.status).toBe(200);
    expect(after.events).toBe(1);
    expect(after.error).toMatch(/aborted/);
    await waitFor(async () => upstream.inFlight(key) === 0, 2_000, 'the upstream streams to be closed');
    expect((await stream('/sse/d?events=1&everyMs=10', key)).status).toBe(200);
  });
});

describe('abandoned exchanges', () => {
  it('20 clients that go away after 150 ms (max 1, a 3 s endpoint): the gateway aborts their upstream requests and the upstream never holds more than 1', async () => {
    const key = 'impatient';
    const requests = Array.from({ length: 20 }, async (_, i) => {
      await sleep(i * 60);
      const req = httpRequest({
        host: '127.0.0.1',
        port: gw.port,
        path: '/slow/report?ms=3000',
        headers: { 'x-api-key': key },
        agent: false,
      });
      req.on('error', () => {});
      req.end();
      await sleep(150);
      req.destroy();
    });
    await Promise.all(requests);
    await waitFor(
      async () => upstream.inFlight(key) === 0,
      3_000,
      'the aborted requests to end at the upstream',
    );
    expect(upstream.mostInFlight(key)).toBe(1);
    // the gateway did not wait for the upstream's 3 s: each abandoned request was aborted, and its
    // slot taken again by a later client
    expect(upstream.received(key)).toBeGreaterThan(3);
    expect(upstream.abandoned(key)).toBe(upstream.received(key));
  }, 20_000);
});

describe('what a proxy owes its upstream', () => {
  it('a client that goes away from a request no rule limits: its upstream request is aborted too', async () => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: gw.port,
      path: '/plain/x?ms=3000',
      headers: { 'x-api-key': 'gone-unlimited' },
      agent: false,
    });
    req.on('error', () => {});
    req.end();
    await waitFor(() => upstream.received('gone-unlimited') === 1, 2_000, 'the request at the upstream');
    req.destroy();
    await waitFor(() => upstream.abandoned('gone-unlimited') === 1, 1_500, 'the upstream request aborted');
    // when the client left (it leaves within a poll of the request's arrival), not at UPSTREAM_TIMEOUT_MS (400 ms)
    expect(upstream.abandonedAfterMs('gone-unlimited')).toBeLessThan(300);
  });

  it('a client that reads slowly slows the upstream down (nothing piles up in the gateway), then gets every byte', async () => {
    const MIB = 64;
    const socket = connect(gw.port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.pause();
    socket.write(
      `GET /big/x?mib=${MIB} HTTP/1.1\r\nHost: t\r\nX-Api-Key: slow-reader\r\nConnection: close\r\n\r\n`,
    );
    await waitFor(() => upstream.written('slow-reader') > 0, 2_000, 'the upstream writing');
    await sleep(800);
    // socket buffers on the way hold a few MiB at most: the rest waits at the upstream
    const writtenWhilePaused = upstream.written('slow-reader');
    expect(writtenWhilePaused).toBeLessThan((MIB / 2) * 1024 * 1024);
    let received = 0;
    socket.on('data', (data: Buffer) => {
      received += data.length;
    });
    socket.resume();
    await new Promise((resolve) => socket.once('close', resolve));
    // the head, then exactly the body
    expect(received).toBeGreaterThan(MIB * 1024 * 1024);
    expect(received).toBeLessThan(MIB * 1024 * 1024 + 1024);
    expect(upstream.written('slow-reader')).toBe(MIB * 1024 * 1024);
  });
});
