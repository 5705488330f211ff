/**
 * `GET /rules/{id}/offenders` without a Redis for analytics (what the embedded demo runs): 503
 * SLUICE_ANALYTICS_UNAVAILABLE, which the console shows as its note. With a Redis, the gateway tests
 * (apps/gateway/test/visibility.int.test.ts) check the counts two gateways send.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Backend, createRule, expectError, pgliteBackend, reader, startApp } from './support/app.js';

let backend: Backend;
let app: FastifyInstance;

beforeAll(async () => {
  backend = await pgliteBackend();
  app = await startApp(backend);
});
afterAll(async () => {
  await app?.close();
  await backend?.cleanup();
});

describe('GET /rules/{id}/offenders without REDIS_URL', () => {
  it('answers 503 SLUICE_ANALYTICS_UNAVAILABLE for a rule that exists, saying what to set', async () => {
    const rule = await createRule(app);
    const res = await app.inject({ method: 'GET', url: `/rules/${rule.id}/offenders`, headers: reader });
    expectError(res, 503);
    expect(res.json()).toMatchObject({ code: 'SLUICE_ANALYTICS_UNAVAILABLE' });
    expect(res.json().message).toMatch(/REDIS_URL/);
  });

  it('answers 404 for an unknown rule and 400 for minutes out of 1–60', async () => {
    const unknown = await app.inject({
      method: 'GET',
      url: '/rules/00000000-0000-4000-8000-000000000000/offenders',
      headers: reader,
    });
    expectError(unknown, 404);
    expect(
      (await app.inject({ method: 'GET', url: '/rules/nope/offenders', headers: reader })).statusCode,
    ).toBe(404);
    const rule = await createRule(app);
    const tooMany = await app.inject({
      method: 'GET',
      url: `/rules/${rule.id}/offenders?minutes=61`,
      headers: reader,
    });
    expectError(tooMany, 400);
  });
});
