import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createUpstreamServer, type UpstreamReply } from './upstream-server.js';

const server = createUpstreamServer('test-upstream');
let base = '';
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

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
