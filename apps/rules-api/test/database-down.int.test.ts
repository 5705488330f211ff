/**
 * The database goes away: `/readyz` and every route answer 503 JSON within about DB_TIMEOUT_MS
 * (2 s), never hang, and the API recovers by itself when the database is back. The elapsed-time
 * bounds are generous: this is a hang check, not a performance assertion.
 */

import { createTestDatabase, databaseUrl, type TestDatabase } from '@sluice/test-support';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, expectError, ruleInput, startApp } from './support/app.js';
import { closedPort, TcpProxy } from './support/tcp-proxy.js';

/** Default DB_TIMEOUT_MS is 2,000 ms; allow slack for a busy machine. */
const HANG_BOUND_MS = 3_500;

async function timed(run: () => Promise<LightMyRequestResponse>) {
  const startedAt = performance.now();
  const res = await run();
  return { res, elapsedMs: performance.now() - startedAt };
}

async function expectUnavailable(
  app: FastifyInstance,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  url: string,
) {
  const payload = method === 'POST' || method === 'PUT' ? ruleInput() : undefined;
  const { res, elapsedMs } = await timed(() => app.inject({ method, url, headers: admin, payload }));
  const body = expectError(res, 503);
  expect(body.code, `${method} ${url}`).toBe('SLUICE_DATABASE_UNAVAILABLE');
  expect(elapsedMs, `${method} ${url}`).toBeLessThan(HANG_BOUND_MS);
}

async function expectNotReady(app: FastifyInstance) {
  const { res, elapsedMs } = await timed(() => app.inject({ method: 'GET', url: '/readyz' }));
  expectError(res, 503);
  expect(elapsedMs).toBeLessThan(HANG_BOUND_MS);
}

const SOME_ID = '00000000-0000-4000-8000-000000000000';

describe('a database that refuses connections', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    const port = await closedPort();
    app = await startApp(
      { env: { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/sluice` }, cleanup: async () => {} },
      {},
      { skipMigrations: true },
    );
  });
  afterAll(() => app?.close());

  it('is not ready (503) and every route answers 503 quickly; /healthz stays 200', async () => {
    await expectNotReady(app);
    await expectUnavailable(app, 'POST', '/rules');
    await expectUnavailable(app, 'PUT', `/rules/${SOME_ID}`);
    await expectUnavailable(app, 'DELETE', `/rules/${SOME_ID}`);
    await expectUnavailable(app, 'GET', '/rules');
    await expectUnavailable(app, 'GET', `/rules/${SOME_ID}`);
    await expectUnavailable(app, 'GET', '/rules/snapshot');
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });
});

describe('a database that stops, hangs, and comes back', () => {
  let db: TestDatabase;
  let proxy: TcpProxy;
  let app: FastifyInstance;

  beforeAll(async () => {
    db = await createTestDatabase();
    proxy = await TcpProxy.start({ host: '127.0.0.1', port: 5432 });
    const url = new URL(databaseUrl(db.name));
    url.port = String(proxy.port);
    app = await startApp({ env: { DATABASE_URL: url.toString() }, cleanup: async () => {} });
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.stop();
    await db?.drop();
  });

  const countRules = async () => Number((await db.query('SELECT count(*)::int AS n FROM rules'))[0]!.n);

  it('stopped: 503 within the bound, nothing half-written, and back to normal when it returns', async () => {
    const rule = (
      await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: ruleInput() })
    ).json();
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const before = await countRules();

    await proxy.stop();
    await expectNotReady(app);
    await expectUnavailable(app, 'POST', '/rules');
    await expectUnavailable(app, 'PUT', `/rules/${rule.id}`);
    await expectUnavailable(app, 'DELETE', `/rules/${rule.id}`);
    await expectUnavailable(app, 'GET', `/rules/${rule.id}`);

    await proxy.listen();
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    expect(await countRules()).toBe(before);
    const created = await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: ruleInput() });
    expect(created.statusCode).toBe(201);
    expect(
      (await app.inject({ method: 'GET', url: `/rules/${rule.id}`, headers: admin })).json().version,
    ).toBe(1);
  });

  it('hung (connections open but silent): 503 within the bound, then recovers', async () => {
    // Warm the pool so that some requests get an already-open (now silent) connection.
    await Promise.all(
      Array.from({ length: 4 }, () => app.inject({ method: 'GET', url: '/rules', headers: admin })),
    );
    proxy.freeze();
    const results = await Promise.all([
      timed(() => app.inject({ method: 'GET', url: '/readyz' })),
      timed(() => app.inject({ method: 'POST', url: '/rules', headers: admin, payload: ruleInput() })),
      timed(() => app.inject({ method: 'POST', url: '/rules', headers: admin, payload: ruleInput() })),
      timed(() => app.inject({ method: 'GET', url: '/rules', headers: admin })),
    ]);
    for (const { res, elapsedMs } of results) {
      expectError(res, 503);
      expect(elapsedMs).toBeLessThan(HANG_BOUND_MS);
    }

    await proxy.stop();
    await proxy.listen();
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const created = await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: ruleInput() });
    expect(created.statusCode).toBe(201);
  });
});
