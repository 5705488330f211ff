/**
 * What the upstream is told and what the client gets back, over raw sockets from two peers on
 * loopback (127.0.0.2, the trusted proxy when TRUST_PROXY names it, and 127.0.0.3, anyone else), each
 * sending spoofed forwarding headers and request ids: the forwarding headers, the request id (in
 * every answer, its body and the log), traceparent, and `;preserveHost`. Rules in code, in-process store.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { StaticRules } from '@sluice/engine';
import { checkRule, MemoryStore, type Rule, withDefaults } from '@sluice/shared';
import Fastify from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildGateway, type Gateway } from '../app.js';
import { loadConfig } from '../config/config.js';

const TRUSTED = '127.0.0.2';
const STRANGER = '127.0.0.3';

/** The upstream: answers every request with the headers it received, as JSON. */
let upstream: Server;
let upstreamUrl: string;
const received: IncomingHttpHeaders[] = [];
beforeAll(async () => {
  upstream = createServer((req, res) => {
    received.push(req.headers);
    req.resume();
    req.on('end', () => res.writeHead(200, { 'x-request-id': 'the-upstream-own-id' }).end('ok'));
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
});

const limited: Rule = {
  ...withDefaults({
    name: 'limited',
    match: { path: '/limited' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  }),
  id: '00000000-0000-4000-8000-000000000001',
  version: 1,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
};
expect(checkRule(limited)).toEqual([]);

async function start(env: Record<string, string> = {}, logLines?: string[]) {
  await running?.close();
  const config = loadConfig({
    PORT: '0',
    ADMIN_PORT: '0',
    HOST: '127.0.0.1',
    UPSTREAMS: `/gone=http://127.0.0.1:9,/keep=${upstreamUrl};preserveHost,/=${upstreamUrl}`,
    RULES_API_URL: 'http://127.0.0.1:9',
    LOG_LEVEL: 'silent',
    ...env,
  });
  const logger =
    logLines === undefined
      ? undefined
      : Fastify({ logger: { level: 'info', stream: { write: (line: string) => logLines.push(line) } } }).log;
  running = buildGateway(config, {
    rules: new StaticRules([limited]),
    store: new MemoryStore(),
    defaultMetrics: false,
    ...(logger && { logger }),
  });
  const { proxyUrl } = await running.start();
  await running.ready();
  return Number(new URL(proxyUrl).port);
}

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One request written as given (`lines`: the head after the request line) from `from`; the answer once the connection closes. */
function send(
  port: number,
  from: string,
  target: string,
  lines: string[],
  method = 'GET',
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress: from });
    let text = '';
    socket.on('connect', () =>
      socket.write(
        `${method} ${target} HTTP/1.1\r\n${[...lines, 'Connection: close'].join('\r\n')}\r\n\r\n`,
        'latin1',
      ),
    );
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const [head = '', body = ''] = text.split('\r\n\r\n');
      const [statusLine = '', ...headerLines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of headerLines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body });
    });
  });
}

/** What every client in these tests claims about itself. */
const SPOOFED = [
  'X-Forwarded-For: 6.6.6.6, 203.0.113.7',
  'X-Forwarded-Proto: https',
  'X-Forwarded-Host: shop.example.com',
  'X-Forwarded-Port: 443',
  'Forwarded: for=6.6.6.6;proto=https',
  'X-Request-Id: client-chosen-id',
];

/** The request the upstream received last, after `answer` came back. */
function lastReceived(): IncomingHttpHeaders {
  return received.at(-1)!;
}

describe('forwarding headers', () => {
  it('an untrusted peer: everything it claimed is replaced by what the gateway saw', async () => {
    for (const trustProxy of [TRUSTED, 'false']) {
      const port = await start({ TRUST_PROXY: trustProxy });
      const answer = await send(port, STRANGER, '/x', ['Host: API.Example.com:8080', ...SPOOFED]);
      expect(answer.status).toBe(200);
      const seen = lastReceived();
      expect(seen['x-forwarded-for']).toBe(STRANGER);
      expect(seen['x-forwarded-proto']).toBe('http');
      expect(seen['x-forwarded-host']).toBe('api.example.com:8080');
      expect(seen['x-forwarded-port']).toBe('8080');
      expect(seen.forwarded).toBeUndefined();
      expect(seen['x-request-id']).not.toBe('client-chosen-id');
      expect(seen['x-request-id']).toBe(answer.headers['x-request-id']);
    }
  });

  it('a trusted proxy: its chain is kept and extended with the peer; what its own client claimed is dropped', async () => {
    const port = await start({ TRUST_PROXY: `${TRUSTED},10.0.0.0/8` });
    const answer = await send(port, TRUSTED, '/x', [
      'Host: api.example.com',
      'X-Forwarded-For: 6.6.6.6, 203.0.113.7, 10.1.2.3',
      'X-Forwarded-Proto: https',
      'X-Forwarded-Host: shop.example.com',
      'X-Forwarded-Port: 443',
      'X-Request-Id: edge-7f3a',
    ]);
    expect(answer.status).toBe(200);
    const seen = lastReceived();
    // 10.1.2.3 is trusted, 203.0.113.7 is the client; what 203.0.113.7 wrote (6.6.6.6) never passes
    expect(seen['x-forwarded-for']).toBe(`203.0.113.7, 10.1.2.3, ${TRUSTED}`);
    expect(seen['x-forwarded-proto']).toBe('https');
    expect(seen['x-forwarded-host']).toBe('shop.example.com');
    expect(seen['x-forwarded-port']).toBe('443');
    expect(seen['x-request-id']).toBe('edge-7f3a');
    expect(answer.headers['x-request-id']).toBe('edge-7f3a');
  });

  it('a trusted hop count: the n nearest hops are believed', async () => {
    const port = await start({ TRUST_PROXY: '1' });
    await send(port, STRANGER, '/x', ['Host: a', 'X-Forwarded-For: 6.6.6.6, 203.0.113.7']);
    expect(lastReceived()['x-forwarded-for']).toBe(`203.0.113.7, ${STRANGER}`);
  });

  it('FORWARDED_HEADERS: forwarded writes RFC 7239 only, both writes both, none writes nothing (and passes nothing on)', async () => {
    const trusted = { TRUST_PROXY: TRUSTED };
    const claims = ['Host: api.example.com:8443', 'X-Forwarded-For: 2001:db8::7', 'X-Forwarded-Proto: https'];

    await send(await start({ ...trusted, FORWARDED_HEADERS: 'forwarded' }), TRUSTED, '/x', claims);
    let seen = lastReceived();
    expect(seen.forwarded).toBe(
      `for="[2001:db8::7]";host="api.example.com:8443";proto=https, for=${TRUSTED}`,
    );
    expect(Object.keys(seen).filter((name) => name.startsWith('x-forwarded-'))).toEqual([]);

    await send(await start({ ...trusted, FORWARDED_HEADERS: 'both' }), STRANGER, '/x', [
      'Host: a',
      ...SPOOFED,
    ]);
    seen = lastReceived();
    expect(seen.forwarded).toBe(`for=${STRANGER};host=a;proto=http`);
    expect(seen['x-forwarded-for']).toBe(STRANGER);

    await send(await start({ ...trusted, FORWARDED_HEADERS: 'none' }), STRANGER, '/x', [
      'Host: a',
      ...SPOOFED,
    ]);
    seen = lastReceived();
    expect(Object.keys(seen).filter((name) => name.includes('forwarded'))).toEqual([]);
  });

  it(';preserveHost sends the client Host (as routed, with its port); other entries send the upstream’s', async () => {
    const port = await start();
    await send(port, STRANGER, '/keep/x', ['Host: API.Example.com.:8080']);
    expect(lastReceived().host).toBe('api.example.com:8080');
    await send(port, STRANGER, '/x', ['Host: API.Example.com.:8080']);
    expect(lastReceived().host).toBe(new URL(upstreamUrl).host);
    expect(lastReceived()['x-forwarded-host']).toBe('api.example.com:8080');
  });

  it('traceparent and tracestate pass through unchanged', async () => {
    const port = await start();
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await send(port, STRANGER, '/x', [
      'Host: a',
      `traceparent: ${traceparent}`,
      'tracestate: congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
    ]);
    expect(lastReceived().traceparent).toBe(traceparent);
    expect(lastReceived().tracestate).toBe('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
  });
});

describe('request ids', () => {
  it('are generated, unique, and kept only from a trusted peer when 1–128 printable ASCII characters, sent once', async () => {
    const port = await start({ TRUST_PROXY: TRUSTED });
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++)
      ids.add((await send(port, STRANGER, '/x', ['Host: a'])).headers['x-request-id']!);
    expect(ids.size).toBe(5);
    const kept = 'a'.repeat(128);
    expect(
      (await send(port, TRUSTED, '/x', ['Host: a', `X-Request-Id: ${kept}`])).headers['x-request-id'],
    ).toBe(kept);
    for (const bad of [['a'.repeat(129)], ['caf\u00e9'], ['one', 'two']]) {
      const answer = await send(
        port,
        TRUSTED,
        '/x',
        ['Host: a', ...bad.map((id) => `X-Request-Id: ${id}`)].map((line) =>
          Buffer.from(line, 'utf8').toString('latin1'),
        ),
      );
      expect(answer.status).toBe(200);
      expect(bad).not.toContain(answer.headers['x-request-id']);
      expect(lastReceived()['x-request-id']).toBe(answer.headers['x-request-id']);
    }
  });

  it("are in every answer the gateway makes itself, header and body (429, 400, 502), and its log lines; the upstream's own id never replaces it", async () => {
    const logLines: string[] = [];
    const port = await start({ TRUST_PROXY: TRUSTED }, logLines);
    const proxied = await send(port, TRUSTED, '/limited', ['Host: a']);
    expect(proxied.status).toBe(200);
    expect(proxied.headers['x-request-id']).not.toBe('the-upstream-own-id');
    for (const [target, status] of [
      ['/limited', 429],
      ['/a/../../x', 400],
      ['/gone/x', 502],
    ] as const) {
      const answer = await send(port, TRUSTED, target, ['Host: a', `X-Request-Id: edge-${status}`]);
      expect(answer.status, target).toBe(status);
      expect(answer.headers['x-request-id']).toBe(`edge-${status}`);
      expect(JSON.parse(answer.body).requestId).toBe(`edge-${status}`);
    }
    // the log line about the 502 names the request
    const failed = logLines
      .map((line) => JSON.parse(line))
      .find((line) => line.msg === 'upstream request failed');
    expect(failed?.reqId).toBe('edge-502');
  });

  it('are in the answer Node makes on the bare socket when a request body times out', async () => {
    const port = await start({ TRUST_PROXY: TRUSTED, HEADERS_TIMEOUT_MS: '300', REQUEST_TIMEOUT_MS: '600' });
    const answer = await send(
      port,
      TRUSTED,
      '/x',
      ['Host: a', 'X-Request-Id: slow-body', 'Content-Length: 10'],
      'POST',
    );
    expect(answer.status).toBe(408);
    expect(answer.headers['x-request-id']).toBe('slow-body');
    expect(JSON.parse(answer.body)).toMatchObject({ code: 'SLUICE_REQUEST_TIMEOUT', requestId: 'slow-body' });
  });
});
