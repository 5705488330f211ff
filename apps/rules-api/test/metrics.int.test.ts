/**
 * `GET /metrics` of the rules API, on a fresh Postgres database: the series a dashboard needs exist at
 * 0 before anything happens, requests are counted by route pattern and status, database operations are
 * timed, the rule-set version follows writes, and Debian's `promtool check metrics` (package
 * `prometheus`) accepts the live output. A database that refuses connections shows in the error counter.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, type Backend, createRule, postgresBackend, ruleInput, startApp } from './support/app.js';
import { closedPort } from './support/tcp-proxy.js';

const PROMTOOL = process.env.PROMTOOL_PATH ?? '/usr/bin/promtool';

/** The value of one sample line (`name{labels} value`), or undefined when the series is absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function scrape(app: FastifyInstance) {
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.body;
}

describe('GET /metrics', () => {
  let backend: Backend;
  let app: FastifyInstance;
  beforeAll(async () => {
    backend = await postgresBackend();
    app = await startApp(backend);
  });
  afterAll(async () => {
    await app?.close();
    await backend?.cleanup();
  });

  it('shows known series at 0 before the first event, without a token', async () => {
    const text = await scrape(app);
    // every documented status of every route, e.g. the 412 of a conditional PUT
    expect(
      sample(text, 'sluice_rules_api_requests_total{method="PUT",route="/rules/:id",status="412"}'),
    ).toBe(0);
    expect(sample(text, 'sluice_rules_api_requests_total{method="GET",route="/readyz",status="503"}')).toBe(
      0,
    );
    for (const operation of ['create', 'replace', 'snapshot', 'ping']) {
      expect(sample(text, `sluice_rules_api_database_errors_total{operation="${operation}"}`)).toBe(0);
      expect(sample(text, `sluice_rules_api_database_duration_seconds_count{operation="${operation}"}`)).toBe(
        0,
      );
    }
    expect(sample(text, 'sluice_rules_api_ruleset_version')).toBe(0);
    expect(text).toContain('process_cpu_seconds_total');
  });

  it('counts requests by route pattern and status, times the database and follows the rule-set version', async () => {
    const rule = await createRule(app, ruleInput());
    const wrong = await app.inject({
      method: 'PUT',
      url: `/rules/${rule.id}`,
      headers: { ...admin, 'if-match': '"99"' },
      payload: ruleInput({ name: rule.name }),
    });
    expect(wrong.statusCode).toBe(412);
    expect((await app.inject({ method: 'GET', url: '/nowhere' })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);

    const text = await scrape(app);
    expect(sample(text, 'sluice_rules_api_requests_total{method="POST",route="/rules",status="201"}')).toBe(
      1,
    );
    expect(
      sample(text, 'sluice_rules_api_requests_total{method="PUT",route="/rules/:id",status="412"}'),
    ).toBe(1);
    expect(sample(text, 'sluice_rules_api_requests_total{method="GET",route="unmatched",status="404"}')).toBe(
      1,
    );
    expect(sample(text, 'sluice_rules_api_requests_total{method="GET",route="/readyz",status="200"}')).toBe(
      1,
    );
    expect(sample(text, 'sluice_rules_api_database_duration_seconds_count{operation="create"}')).toBe(1);
    expect(sample(text, 'sluice_rules_api_database_duration_seconds_count{operation="replace"}')).toBe(1);
    expect(sample(text, 'sluice_rules_api_database_duration_seconds_count{operation="ping"}')).toBe(1);
    // a 412 is an answer, not a database failure
    expect(sample(text, 'sluice_rules_api_database_errors_total{operation="replace"}')).toBe(0);
    const snapshot = await app.inject({ method: 'GET', url: '/rules/snapshot', headers: admin });
    expect(sample(text, 'sluice_rules_api_ruleset_version')).toBe(snapshot.json().version);
    expect(snapshot.json().version).toBeGreaterThan(0);
  });

  it('passes `promtool check metrics` (no gauge named …_total, counters end in _total, help everywhere)', async () => {
    if (!existsSync(PROMTOOL)) throw new Error(`${PROMTOOL} is missing: apt-get install -y prometheus`);
    const text = await scrape(app);
    const run = promisify(execFile)(PROMTOOL, ['check', 'metrics']);
    run.child.stdin!.end(text);
    const { stdout, stderr } = await run;
    expect(`${stdout}${stderr}`).toBe('');
  });
});

describe('GET /metrics with a database that refuses connections', () => {
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

  it('still answers, counts the failed operations and keeps the version unknown (-1)', async () => {
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    expect((await app.inject({ method: 'GET', url: '/rules', headers: admin })).statusCode).toBe(503);
    const text = await scrape(app);
    expect(sample(text, 'sluice_rules_api_database_errors_total{operation="ping"}')).toBe(1);
    expect(sample(text, 'sluice_rules_api_database_errors_total{operation="list"}')).toBe(1);
    expect(sample(text, 'sluice_rules_api_requests_total{method="GET",route="/rules",status="503"}')).toBe(1);
    expect(sample(text, 'sluice_rules_api_ruleset_version')).toBe(-1);
  });
});
