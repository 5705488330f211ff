/**
 * WebSockets through the gateway, on the real Redis (docs/gateway.md, "WebSockets"): the handshake is
 * decided like a GET (a per-IP concurrency limit of 2 here: the third handshake gets 429 and never
 * reaches the upstream; closing one lets the next in), messages are relayed both ways, a refusing or
 * unreachable upstream is answered as for any request, host rules apply to the handshake, shutdown
 * closes with 1001 and gives the slots back, and a SIGKILLed gateway's slots come back by themselves
 * within a slot lifetime of their last renewal.
 */
import type { ChildProcess } from 'node:child_process';
import { partitionKey } from '@sluice/shared';
import { sleep, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type WebSocket from 'ws';
import {
  type RunningGateway,
  spawnGatewayProcess,
  startGateway,
  uniqueKeyPrefix,
} from './helpers/gateway.js';
import { rawHttp } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import {
  closed,
  type EchoUpstream,
  type Handshake,
  nextMessage,
  openWebSocket,
  startEchoUpstream,
} from './helpers/websocket.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const prefix = uniqueKeyPrefix('websocket');
let api: RulesApi;
let upstream: EchoUpstream;
let gw: RunningGateway;
const children: ChildProcess[] = [];

function env(): Record<string, string> {
  return {
    UPSTREAMS: `/gone=http://127.0.0.1:9,/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    // a slow Redis on a busy machine must not hand decisions to the local fallback (it knows no slots)
    STORE_TIMEOUT_MS: '2000',
  };
}

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startEchoUpstream()]);
  await api.createRule({
    name: 'ws-per-ip',
    match: { path: '/ws/**' },
    limits: [{ name: 'open', client: { by: 'ip' }, algorithm: 'concurrency', max: 2 }],
  } as unknown as RuleBody);
  await api.createRule({
    name: 'ws-host',
    match: { path: '/hosted/**', host: 'api.example.com' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  });
  await api.createRule({
    name: 'ws-charged',
    match: { path: '/charged/**' },
    limit: { capacity: 10, refill: 1, period: '1h' },
    cost: 4,
    charge: { from: 'bytes', unitBytes: 1_000 },
  } as unknown as RuleBody);
  gw = await startGateway({ ...env(), UPSTREAM_TIMEOUT_MS: '2000', SHUTDOWN_TIMEOUT_MS: '300' });
}, 60_000);

/** every client WebSocket a test opened, closed after it */
const clients: WebSocket[] = [];
afterEach(async () => {
  for (const ws of clients.splice(0)) ws.close();
  await waitFor(async () => upstream.open() === 0, 3_000, 'the upstream connections to close');
});

async function open(url: string, options: Parameters<typeof openWebSocket>[1] = {}): Promise<Handshake> {
  const handshake = await openWebSocket(url, options);
  if (handshake.ok) clients.push(handshake.ws);
  return handshake;
}

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

const wsUrl = (g: { port: number }, path: string) => `ws://127.0.0.1:${g.port}${path}`;

function opened(handshake: Handshake) {
  if (!handshake.ok) throw new Error(`expected a WebSocket, got ${handshake.status} ${handshake.body}`);
  return handshake;
}

describe('WebSockets through the gateway', () => {
  it('echo both ways, with the forwarding headers and request id upstream and the decision headers in the 101', async () => {
    const { ws, headers } = opened(
      await open(wsUrl(gw, '/ws/echo?room=1'), { localAddress: '127.0.0.11', protocols: ['chat'] }),
    );
    const seen = upstream.handshakes.at(-1)!;
    expect(seen.path).toBe('/ws/echo?room=1');
    expect(seen.headers['x-forwarded-for']).toBe('127.0.0.11');
    expect(seen.headers['x-request-id']).toBe(headers['x-request-id']);
    expect(headers.ratelimit).toBe(`"ws-per-ip.open";r=1;t=0;pk=${partitionKey('ip:127.0.0.11')}`);
    expect(headers['ratelimit-policy']).toBe('"ws-per-ip.open";q=2;qu="concurrent-requests"');
    expect(ws.protocol).toBe('chat');
    ws.send('hello');
    expect(await nextMessage(ws)).toBe('hello');
    ws.send(Buffer.from([0, 1, 2, 255]));
    const binary = await new Promise<Buffer>((resolve) =>
      ws.once('message', (data) => resolve(data as Buffer)),
    );
    expect([...binary]).toEqual([0, 1, 2, 255]);
    ws.close(4000, 'bye');
    expect(await closed(ws)).toBe(4000);
    await waitFor(async () => upstream.closeCodes.at(-1) === 4000, 2_000, 'the close code upstream');
  });

  it('a per-IP concurrency limit of 2: the third handshake gets 429 and never reaches the upstream; closing one lets the next in', async () => {
    const from = { localAddress: '127.0.0.12' };
    const first = opened(await open(wsUrl(gw, '/ws/a'), from));
    const second = opened(await open(wsUrl(gw, '/ws/b'), from));
    const handshakesBefore = upstream.handshakes.length;
    const third = await open(wsUrl(gw, '/ws/c'), from);
    expect(third.ok).toBe(false);
    if (third.ok) return;
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    // draft-11: every slot held, so more quota may come any moment: t=1, as Retry-After
    expect(third.headers.ratelimit).toBe(`"ws-per-ip.open";r=0;t=1;pk=${partitionKey('ip:127.0.0.12')}`);
    expect(JSON.parse(third.body)).toMatchObject({
      rule: 'ws-per-ip',
      limit: 'open',
      retryAfter: 1,
      requestId: third.headers['x-request-id'],
    });
    expect(upstream.handshakes.length).toBe(handshakesBefore);
    // another client has slots of its own
    const other = opened(await open(wsUrl(gw, '/ws/d'), { localAddress: '127.0.0.13' }));

    // the client closes one: its slot comes back, and the next handshake is admitted
    first.ws.close();
    await closed(first.ws);
    let fourth: Handshake | undefined;
    await waitFor(
      async () => {
        fourth = await open(wsUrl(gw, '/ws/d'), from);
        return fourth.ok;
      },
      3_000,
      'a slot after the client closed',
    );
    // the upstream closes one: that slot comes back too
    upstream.socketOf('/ws/b')!.close(1000);
    expect(await closed(second.ws)).toBe(1000);
    await waitFor(
      async () => (await open(wsUrl(gw, '/ws/e'), from)).ok,
      3_000,
      'a slot after the upstream closed',
    );
    expect(upstream.mostOpen('127.0.0.12')).toBe(2);
    expect(other.ws.readyState).toBe(1);
  });

  it('an upstream that refuses the handshake is answered as it answered; an unreachable one is 502 with the request id', async () => {
    const refused = await open(wsUrl(gw, '/refuse/x'));
    expect(refused).toMatchObject({ ok: false, status: 403, body: '{"upstream":"no"}' });
    if (refused.ok) return;
    expect(refused.headers['x-upstream']).toBe('yes');
    expect(refused.headers['x-request-id']).toBe(upstream.handshakes.at(-1)!.headers['x-request-id']);
    const unreachable = await open(wsUrl(gw, '/gone/x'));
    expect(unreachable).toMatchObject({ ok: false, status: 502 });
    if (unreachable.ok) return;
    expect(JSON.parse(unreachable.body)).toMatchObject({
      code: 'SLUICE_UPSTREAM_UNREACHABLE',
      requestId: unreachable.headers['x-request-id'],
    });
  });

  it('the handshake is routed, normalised and matched like a GET: host rules and dot segments apply', async () => {
    const handshakes = upstream.handshakes.length;
    const first = await open(wsUrl(gw, '/hosted/x'), { headers: { host: 'API.Example.com.:8080' } });
    expect(first.ok).toBe(true);
    expect(upstream.handshakes.at(-1)!.path).toBe('/hosted/x');
    for (const [path, host] of [
      ['/hosted/x', 'api.example.com'],
      ['/other/../hosted/y', 'api.example.COM'],
      ['//hosted//y', 'api.example.com:443'],
    ] as const) {
      const denied = await open(wsUrl(gw, path), { headers: { host } });
      expect(denied, `${host}${path}`).toMatchObject({ ok: false, status: 429 });
    }
    const refused = await open(wsUrl(gw, '/hosted%2fy'), { headers: { host: 'api.example.com' } });
    expect(refused).toMatchObject({ ok: false, status: 400 });
    expect(upstream.handshakes.length).toBe(handshakes + 1);
  });

  it('a WebSocket costs what its handshake was admitted on: a charge from the response never lowers it', async () => {
    const { ws, headers } = opened(await open(wsUrl(gw, '/charged/a'), { localAddress: '127.0.0.14' }));
    expect(headers.ratelimit).toMatch(/^"ws-charged";r=6;/);
    ws.send('x'.repeat(100));
    await nextMessage(ws);
    ws.close();
    await closed(ws);
    await gw.settled();
    // settled by its response bytes (none), it would have cost nothing: the next would show r=6
    const next = opened(await open(wsUrl(gw, '/charged/b'), { localAddress: '127.0.0.14' }));
    expect(next.headers.ratelimit).toMatch(/^"ws-charged";r=2;/);
  });

  it('a message over BODY_LIMIT_BYTES closes the connection with 1009; another Upgrade (h2c) is proxied as a plain request', async () => {
    const small = await startGateway({ ...env(), BODY_LIMIT_BYTES: '1024', SHUTDOWN_TIMEOUT_MS: '300' });
    try {
      const { ws } = opened(await open(wsUrl(small, '/echo/x')));
      ws.send('x'.repeat(1024));
      expect(await nextMessage(ws)).toHaveLength(1024);
      ws.send('x'.repeat(1025));
      expect(await closed(ws)).toBe(1009);
      const h2c = await rawHttp(
        small.port,
        'GET /plain HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n',
      );
      expect(h2c.status).toBe(200);
      expect(h2c.text).toContain('plain http');
      expect(h2c.closed).toBe(true);
    } finally {
      await small.close();
    }
  });
});

describe('WebSockets when a gateway stops', () => {
  it('on shutdown, after SHUTDOWN_TIMEOUT_MS, both sides are closed with 1001 and the slots are given back', async () => {
    const stopping = await startGateway({ ...env(), SHUTDOWN_TIMEOUT_MS: '300' });
    const from = { localAddress: '127.0.0.21' };
    const held = await Promise.all([
      open(wsUrl(stopping, '/ws/a'), from),
      open(wsUrl(stopping, '/ws/b'), from),
    ]);
    const sockets = held.map((h) => opened(h).ws);
    const codesBefore = upstream.closeCodes.length;
    const startedAtMs = Date.now();
    const closing = stopping.close();
    // still open during the grace time
    await sleep(150);
    expect(sockets.map((ws) => ws.readyState)).toEqual([1, 1]);
    expect(await Promise.all(sockets.map(closed))).toEqual([1001, 1001]);
    await closing;
    expect(Date.now() - startedAtMs).toBeLessThan(2_500);
    expect(upstream.closeCodes.slice(codesBefore)).toEqual([1001, 1001]);
    // both slots are back at once (another gateway on the same Redis admits two)
    const again = await Promise.all([open(wsUrl(gw, '/ws/c'), from), open(wsUrl(gw, '/ws/d'), from)]);
    expect(again.map((h) => h.ok)).toEqual([true, true]);
  });

  it('a SIGKILLed gateway: its WebSocket slots were renewed while open, and come back within a slot lifetime of the last renewal', async () => {
    // slots live UPSTREAM_TIMEOUT_MS + 5 s = 5.5 s from their last renewal; renewed every 1.8–2.8 s
    const lifetimeMs = 5_500;
    const redis = new Redis(REDIS_URL);
    /** the expiry of each slot 127.0.0.22 holds, in Redis (ms since the epoch, the machine's clock) */
    const expiries = async (): Promise<number[]> => {
      const [key] = await redis.keys(`${prefix}*ip:127.0.0.22}*`);
      if (key === undefined) return [];
      const flat = await redis.zrange(key, 0, -1, 'WITHSCORES');
      return flat.filter((_, i) => i % 2 === 1).map(Number);
    };
    try {
      const dying = await spawnGatewayProcess({ ...env(), UPSTREAM_TIMEOUT_MS: '500' });
      children.push(dying.child);
      const from = { localAddress: '127.0.0.22' };
      const held = await Promise.all([open(wsUrl(dying, '/ws/a'), from), open(wsUrl(dying, '/ws/b'), from)]);
      expect(held.map((h) => h.ok)).toEqual([true, true]);
      const taken = await expiries();
      expect(taken).toHaveLength(2);
      // the gateway holding them renews both before they expire
      let renewed: number[] = [];
      await waitFor(
        async () => {
          renewed = await expiries();
          return renewed.length === 2 && Math.min(...renewed) > Math.max(...taken);
        },
        lifetimeMs - 1_000,
        'the slots to be renewed',
      );
      dying.child.kill('SIGKILL');
      const killedAtMs = Date.now();
      await Promise.all(held.map((h) => (h.ok ? closed(h.ws) : undefined)));
      expect((await open(wsUrl(gw, '/ws/c'), from)).ok).toBe(false);
      let admittedAtMs = 0;
      await waitFor(
        async () => {
          const handshake = await open(wsUrl(gw, '/ws/c'), from);
          admittedAtMs = Date.now();
          return handshake.ok;
        },
        lifetimeMs + 3_000,
        'the dead gateway’s slots',
      );
      // never before the renewed expiry, and within a lifetime of the last renewal (before the kill)
      expect(admittedAtMs).toBeGreaterThanOrEqual(Math.min(...renewed) - 50);
      expect(admittedAtMs - killedAtMs).toBeLessThan(lifetimeMs + 1_000);
    } finally {
      redis.disconnect();
    }
  }, 30_000);
});
