/**
 * A live gateway's /metrics as Prometheus tooling reads it: `promtool check metrics` (Debian's
 * prometheus package; .ci/run installs it) passes with Node's default metrics on, no gauge is named
 * `…_total`, and every counter with label values known at start is there at 0 before anything happens
 * (a dashboard panel says 0, an alert on `rate()` can evaluate, instead of "No data").
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { StaticRules } from '@sluice/engine';
import { checkRule, type Rule, withDefaults } from '@sluice/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const PROMTOOL = '/usr/bin/promtool';

function rule(name: string, shadow = false): Rule {
  const input = {
    name,
    shadow,
    match: { path: `/api/${name}/**` },
    limit: { capacity: 1, refill: 1, period: '1h' },
  };
  expect(checkRule(input)).toEqual([]);
  return {
    ...withDefaults(input),
    id: `00000000-0000-4000-8000-00000000000${shadow ? 2 : 1}`,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
}

let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  upstream = await startUpstream();
  gw = await startGateway(
    {
      UPSTREAMS: `/api=${upstream.url}`,
      RULES_API_URL: 'http://127.0.0.1:9',
      REDIS_URL: 'redis://127.0.0.1:6379',
      REDIS_KEY_PREFIX: uniqueKeyPrefix('metrics-lint'),
    },
    // Node's default metrics on, as in production (the test helper turns them off by default)
    { rules: new StaticRules([rule('api'), rule('beta', true)]), defaultMetrics: true },
  );
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const scrape = async () => (await fetch(`${gw.adminUrl}/metrics`)).text();

/** `# TYPE <name> <type>` of every metric family. */
function types(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

/** promtool's verdict on an exposition: its exit code and what it printed. */
function promtoolCheck(text: string): { status: number | null; output: string } {
  const run = spawnSync(PROMTOOL, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() };
}

describe("a live gateway's /metrics", () => {
  it('counters with known label values are there at 0 before the first request', async () => {
    const text = await scrape();
    const zero = (name: string, labels: Record<string, string>) =>
      expect(metricValue(text, name, labels), `${name} ${JSON.stringify(labels)}`).toBe(0);
    for (const reason of ['timeout', 'error']) zero('sluice_store_errors_total', { reason });
    zero('sluice_store_fallbacks_total', { policy: 'local' });
    for (const op of ['acquire', 'settle']) zero('sluice_store_calls_total', { op });
    for (const kind of ['refund', 'charge', 'release', 'renew'])
      for (const result of ['ok', 'error']) zero('sluice_settlements_total', { kind, result });
    for (const reason of ['unreachable', 'status', 'invalid'])
      zero('sluice_rules_refresh_failures_total', { reason });
    for (const kind of ['unreachable', 'timeout', 'error'])
      zero('sluice_upstream_errors_total', { upstream: '/api', kind });
    zero('sluice_bad_requests_total', { code: 'SLUICE_NO_UPSTREAM' });
    for (const decision of ['allowed', 'denied', 'shadow_denied', 'unlimited', 'unavailable']) {
      zero('sluice_requests_total', { rule: 'api', decision });
      zero('sluice_requests_total', { rule: '', decision });
    }
    zero('sluice_requests_total', { rule: 'beta', decision: 'shadow_denied' });
  });

  it('names no gauge `…_total`, and every counter `…_total` (what promtool asks)', async () => {
    const families = types(await scrape());
    expect(families.size).toBeGreaterThan(20);
    // Node's default metrics are on: their by-type gauges stay, their `_total` sums are gone
    expect(families.get('sluice_nodejs_active_handles')).toBe('gauge');
    const misnamed = [...families].filter(
      ([name, type]) => (type !== 'counter') === name.endsWith('_total') && type !== 'untyped',
    );
    expect(misnamed).toEqual([]);
  });

  it('passes `promtool check metrics` before and after traffic', async () => {
    // required, never skipped: .ci/run installs it (apt-get install prometheus)
    expect(existsSync(PROMTOOL), `${PROMTOOL} is missing: apt-get install -y prometheus`).toBe(true);
    expect(promtoolCheck(await scrape())).toEqual({ status: 0, output: '' });
    for (const path of ['/api/api/x', '/api/api/x', '/api/beta/x', '/api/beta/x', '/nowhere'])
      await http(gw.port, path);
    const after = await scrape();
    expect(metricValue(after, 'sluice_requests_total', { rule: 'api', decision: 'denied' })).toBe(1);
    expect(metricValue(after, 'sluice_requests_total', { rule: 'beta', decision: 'shadow_denied' })).toBe(1);
    expect(promtoolCheck(after)).toEqual({ status: 0, output: '' });
  });
});
