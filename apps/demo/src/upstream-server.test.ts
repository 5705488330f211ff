import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { createUpstreamServer, type UpstreamReply, type WebSocketGreeting } from './upstream-server.js';

const server = createUpstreamServer('test-upstream');
let base = '';
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(
  () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
);

it('answers with what it received: method, path with query, headers and body size', async () => {
  const res = await fetch(`${base}/api/export?x=1`, {
    method: 'POST',
    headers: { 'x-api-key': 'k1' },
    body: 'hello',
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as UpstreamReply;
  expect(body).toMatchObject({
    upstream: 'test-upstream',
    method: 'POST',
    path: '/api/export?x=1',
    bodyBytes: 5,
  });
  expect(body.headers['x-api-key']).toBe('k1');
});

it('has a health route', async () => {
  const res = await fetch(`${base}/healthz`);
  expect(await res.json()).toEqual({ status: 'ok' });
});

it('answers ?status= after ?ms=, and prices ?cost= in x-sluice-cost (for the lifecycle walk-through)', async () => {
  const startedAt = performance.now();
  const res = await fetch(`${base}/reports/q1?status=503&ms=120&cost=3`);
  expect(performance.now() - startedAt).toBeGreaterThanOrEqual(100);
  expect(res.status).toBe(503);
  expect(res.headers.get('x-sluice-cost')).toBe('3');
  const plain = await fetch(`${base}/reports/q1?status=abc`);
  expect(plain.status).toBe(200);
  expect(plain.headers.get('x-sluice-cost')).toBeNull();
});

it('pulls out what the gateway told it: the forwarding headers and the request id', async () => {
  const res = await fetch(`${base}/api/x`, {
    headers: {
      'x-forwarded-for': '203.0.113.7, 10.0.0.2',
      'x-forwarded-proto': 'https',
      'x-request-id': 'r-1',
    },
  });
  const body = (await res.json()) as UpstreamReply;
  expect(body.requestId).toBe('r-1');
  expect(body.forwarded).toEqual({ for: '203.0.113.7, 10.0.0.2', proto: 'https' });
});

it('streams ?n= server-sent events from /events, each as it is sent', async () => {
  const startedAt = performance.now();
  const res = await fetch(`${base}/events?n=3&everyMs=100`, { headers: { 'x-request-id': 'sse-1' } });
  expect(res.headers.get('content-type')).toBe('text/event-stream');
  const reader = res.body!.getReader();
  const firstChunk = new TextDecoder().decode((await reader.read()).value);
  const firstAt = performance.now() - startedAt;
  let rest = '';
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
    rest += new TextDecoder().decode(chunk.value);
  }
  expect(firstChunk).toContain(
    'id: 1\ndata: {"upstream":"test-upstream","event":1,"of":3,"requestId":"sse-1"}',
  );
  expect(firstAt).toBeLessThan(performance.now() - startedAt - 100);
  expect(rest.match(/^id: /gm)).toHaveLength(2);
});

it('greets a WebSocket to /ws with what it was told, then echoes', async () => {
  const ws = new WebSocket(`${base.replace('http', 'ws')}/ws`, { headers: { 'x-request-id': 'ws-1' } });
  const messages: string[] = [];
  ws.on('message', (data) => messages.push(data.toString()));
  await new Promise((resolve) => ws.once('open', resolve));
  ws.send('ping');
  await vi.waitFor(() => expect(messages).toHaveLength(2));
  expect(JSON.parse(messages[0]!) as WebSocketGreeting).toEqual({
    upstream: 'test-upstream',
    path: '/ws',
    requestId: 'ws-1',
    forwarded: {},
  });
  expect(messages[1]).toBe('ping');
  ws.close();
});
