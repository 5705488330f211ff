/**
 * Connections: a request pipelined behind an answer that closes the connection never reaches an
 * upstream; slow clients are cut by the head, request and keep-alive timeouts while others are
 * served; requests arriving while the gateway closes get SLUICE_SHUTTING_DOWN. Raw sockets throughout.
 */
import { connect, type Socket } from 'node:net';
import { sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type RunningGateway,
  spawnGatewayProcess,
  startGateway,
  uniqueKeyPrefix,
} from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

let api: RulesApi;
let upstream: Upstream;
let gw: RunningGateway;
const REDIS_URL = 'redis://127.0.0.1:6379';
const HEADERS_TIMEOUT_MS = 400;
const REQUEST_TIMEOUT_MS = 800;
const KEEP_ALIVE_TIMEOUT_MS = 400;

function gatewayEnv(name: string) {
  return {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: uniqueKeyPrefix(name),
    HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
    REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_TIMEOUT_MS),
  };
}

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  await api.createRule({
    name: 'limited',
    match: { path: '/limited/**' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  });
  gw = await startGateway(gatewayEnv('connections'));
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

/** A raw connection that records everything it receives and when the server closed it. */
interface Conn {
  socket: Socket;
  text(): string;
  closed(): boolean;
}

function open(port: number): Promise<Conn> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let text = '';
    let closed = false;
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
    });
    socket.on('close', () => {
      closed = true;
    });
    socket.on('error', () => {});
    socket.once('connect', () => resolve({ socket, text: () => text, closed: () => closed }));
    socket.once('error', reject);
  });
}

const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));

describe('pipelined requests behind a close', () => {
  it('a request pipelined behind a 429 that closes the connection never reaches the upstream', async () => {
    expect((await http(gw.port, '/limited/a')).status).toBe(200);
    // a second denial: the gateway now remembers it and can answer the next one at once
    expect((await http(gw.port, '/limited/a')).status).toBe(429);
    const before = upstream.hits('/behind');
    const conn = await open(gw.port);
    conn.socket.write(
      'POST /limited/a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello' +
        'GET /behind/1 HTTP/1.1\r\nHost: t\r\n\r\n' +
        'DELETE /behind/2 HTTP/1.1\r\nHost: t\r\n\r\n',
    );
    await waitFor(async () => conn.closed(), 5_000, 'the gateway to close the connection');
    expect(statuses(conn.text())).toEqual([429]);
    expect(conn.text().toLowerCase()).toContain('connection: close');
    // a request sent after the close reaches the upstream: the pipelined ones, had they been
    // forwarded, would have been before it (parsed ahead of the close), so only this one counts
    expect((await http(gw.port, '/behind/control')).status).toBe(200);
    expect(upstream.hits('/behind')).toBe(before + 1);
  });

  it('a WebSocket handshake or a CONNECT pipelined behind an answer still being sent waits for its turn; the process stays up', async () => {
    // a process of its own: Node hands an upgrade or a CONNECT over at once, even behind an answer
    // still being written, and giving it the socket then threw out of the listener and killed the process
    const proc = await spawnGatewayProcess(gatewayEnv('connections-handover'));
    try {
      const handshake = await open(proc.port);
      handshake.socket.write(
        'GET /slow/before-ws?ms=150 HTTP/1.1\r\nHost: t\r\n\r\n' +
          'GET /after/ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
          'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
      );
      await waitFor(async () => handshake.closed(), 5_000, 'the handshake connection to close');
      // the plain upstream answers the handshake with a 200, relayed as it is
      expect(statuses(handshake.text())).toEqual([200, 200]);
      const connect = await open(proc.port);
      connect.socket.write(
        'GET /slow/before-connect?ms=150 HTTP/1.1\r\nHost: t\r\n\r\n' +
          'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n',
      );
      await waitFor(async () => connect.closed(), 5_000, 'the CONNECT connection to close');
      expect(statuses(connect.text())).toEqual([200, 405]);
      expect(connect.text()).toContain('"code":"SLUICE_METHOD_NOT_ALLOWED"');
      expect(proc.child.exitCode).toBeNull();
      expect((await http(proc.port, '/still-up')).status).toBe(200);
    } finally {
      proc.child.kill('SIGKILL');
    }
  }, 60_000);

  it('pipelined requests on a connection that stays open are all answered, in order', async () => {
    const conn = await open(gw.port);
    conn.socket.write(
      'GET /slow/1?ms=150 HTTP/1.1\r\nHost: t\r\n\r\n' +
        'GET /fast/2 HTTP/1.1\r\nHost: t\r\n\r\n' +
        'GET /fast/3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n',
    );
    await waitFor(async () => conn.closed(), 5_000, 'three answers');
    expect(statuses(conn.text())).toEqual([200, 200, 200]);
    const urls = [...conn.text().matchAll(/"url":"([^"]+)"/g)].map((m) => m[1]);
    expect(urls).toEqual(['/slow/1?ms=150', '/fast/2', '/fast/3']);
  });
});

describe('slow clients', () => {
  it('cuts clients that trickle their head, body or nothing, and idle keep-alive connections, while serving others', async () => {
    const trickleHead: Conn[] = [];
    for (let i = 0; i < 40; i++) {
      const conn = await open(gw.port);
      conn.socket.write('GET /slowloris HTTP/1.1\r\nHost: t\r\nX-Pad: ');
      trickleHead.push(conn);
    }
    const trickleBody: Conn[] = [];
    for (let i = 0; i < 5; i++) {
      const conn = await open(gw.port);
      conn.socket.write('POST /slowbody HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nx');
      trickleBody.push(conn);
    }
    const silent: Conn[] = [];
    for (let i = 0; i < 5; i++) silent.push(await open(gw.port));
    const idle = await open(gw.port);
    idle.socket.write('GET /idle HTTP/1.1\r\nHost: t\r\n\r\n');

    const trickling = [...trickleHead, ...trickleBody];
    const drip = setInterval(() => {
      for (const conn of trickling) if (!conn.closed()) conn.socket.write('a');
    }, 100);
    const startedAt = Date.now();
    let served = 0;
    try {
      // a normal client keeps being served while the slow ones are cut
      while (Date.now() - startedAt < 3_000 && ![...trickling, ...silent, idle].every((c) => c.closed())) {
        expect((await http(gw.port, '/normal')).status).toBe(200);
        served++;
        await sleep(50);
      }
    } finally {
      clearInterval(drip);
    }
    expect(served).toBeGreaterThan(0);
    const open_ = (conns: Conn[]) => conns.filter((c) => !c.closed()).length;
    expect({
      trickleHead: open_(trickleHead),
      trickleBody: open_(trickleBody),
      silent: open_(silent),
      idle: open_([idle]),
    }).toEqual({ trickleHead: 0, trickleBody: 0, silent: 0, idle: 0 });
    // the head tricklers were told why, with a code
    expect(trickleHead[0]!.text()).toMatch(/^HTTP\/1\.1 408 /);
    expect(trickleHead[0]!.text()).toContain('"code":"SLUICE_REQUEST_TIMEOUT"');
    expect(statuses(idle.text())).toEqual([200]);
    expect(upstream.hits('/slowloris')).toBe(0);
  });
});

describe('closing', () => {
  it('answers a request arriving while the gateway closes with SLUICE_SHUTTING_DOWN, after finishing the one in flight', async () => {
    const closing = await startGateway(gatewayEnv('connections-closing'));
    const conn = await open(closing.port);
    conn.socket.write('GET /slow/inflight?ms=1200 HTTP/1.1\r\nHost: t\r\n\r\n');
    // the request is in flight (the upstream holds it for 1.2 s) before the gateway starts closing
    await sleep(300);
    const closed = closing.close();
    await sleep(200);
    conn.socket.write('GET /after-close HTTP/1.1\r\nHost: t\r\n\r\n');
    await closed;
    await waitFor(async () => conn.closed(), 5_000, 'the connection to close');
    expect(statuses(conn.text())).toEqual([200, 503]);
    expect(conn.text()).toContain('"code":"SLUICE_SHUTTING_DOWN"');
    expect(upstream.hits('/after-close')).toBe(0);
  });
});
