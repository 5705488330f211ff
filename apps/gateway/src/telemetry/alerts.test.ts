/**
 * The alert rules that ship (dashboards/prometheus/alerts.yml): promtool accepts them, each one fires
 * on the series it is about and stays quiet on a healthy gateway (promtool's own rule tests,
 * alerts.test.yml beside them), each names only metrics and labels the gateway exports (a renamed
 * metric fails here, not as an alert that can never fire), and each has its runbook in
 * docs/visibility.md.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { GatewayMetrics } from './metrics.js';

const PROMTOOL = '/usr/bin/promtool';
const dashboards = fileURLToPath(new URL('../../../../dashboards/prometheus/', import.meta.url));
const visibility = readFileSync(new URL('../../../../docs/visibility.md', import.meta.url), 'utf8');

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const file = parse(readFileSync(`${dashboards}alerts.yml`, 'utf8')) as { groups: { rules: AlertRule[] }[] };
const alerts = file.groups.flatMap((group) => group.rules);

/** name → label names, from the gateway's own registry (Node's default metrics included). */
async function exported(): Promise<Map<string, Set<string>>> {
  const metrics = new GatewayMetrics({ defaultMetrics: true });
  const names = new Map<string, Set<string>>();
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    const single = metrics.registry.getSingleMetric(metric.name) as unknown as { labelNames?: string[] };
    names.set(metric.name, new Set(single.labelNames ?? []));
  }
  return names;
}

/** Labels Prometheus adds to every scraped series. */
const TARGET_LABELS = new Set(['instance', 'job']);

function promtool(...args: string[]): { status: number | null; output: string } {
  const run = spawnSync(PROMTOOL, args, { cwd: dashboards, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe('the alert rules (dashboards/prometheus/alerts.yml)', () => {
  it('cover the store failing or falling back, the breaker, stale or failing rules, leases and upstream 5xx', () => {
    expect(alerts.map((rule) => rule.alert)).toEqual([
      'SluiceStoreFailing',
      'SluiceStoreFallingBack',
      'SluiceStoreBreakerOpen',
      'SluiceRulesNotLoaded',
      'SluiceRulesStale',
      'SluiceRulesRefreshFailing',
      'SluiceLeaseTokensOutstandingHigh',
      'SluiceUpstream5xx',
    ]);
    for (const rule of alerts) {
      expect(rule.labels?.severity, rule.alert).toMatch(/^(warning|critical)$/);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
    }
  });

  it('name only metrics, and labels, that the gateway exports', async () => {
    const names = await exported();
    const problems: string[] = [];
    for (const { alert, expr } of alerts) {
      const metrics = [...expr.matchAll(/\bsluice_[a-z_]+\b/g)].map((m) => m[0]);
      expect(metrics.length, alert).toBeGreaterThan(0);
      const labels = new Set(TARGET_LABELS);
      for (const metric of metrics) {
        if (!names.has(metric)) problems.push(`${alert}: ${metric}`);
        for (const label of names.get(metric) ?? []) labels.add(label);
      }
      const used = [
        ...[...expr.matchAll(/\bby \(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((s) => s.trim())),
        ...[...expr.matchAll(/[{,]\s*([a-z_]+)\s*(?:=~|!=|!~|=)/g)].map((m) => m[1]!),
      ];
      for (const label of used) if (!labels.has(label)) problems.push(`${alert}: label ${label}`);
    }
    expect(problems).toEqual([]);
  });

  it('each has a runbook in docs/visibility.md, under a heading its annotation names', () => {
    const anchors = new Set(
      [...visibility.matchAll(/^#+ (.+)$/gm)].map((m) =>
        m[1]!
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    for (const { alert, annotations } of alerts) {
      const anchor = `${alert.toLowerCase()}`;
      expect(annotations?.runbook, alert).toBe(`docs/visibility.md#${anchor}`);
      expect(anchors, alert).toContain(anchor);
    }
  });

  it('pass `promtool check rules`, and promtool rule tests: each fires on its trouble, none on a healthy gateway', () => {
    // required, never skipped: .ci/run installs it (apt-get install prometheus)
    expect(existsSync(PROMTOOL), `${PROMTOOL} is missing: apt-get install -y prometheus`).toBe(true);
    const check = promtool('check', 'rules', 'alerts.yml');
    expect(check.output).toContain(`SUCCESS: ${alerts.length} rules found`);
    expect(check.status).toBe(0);
    const test = promtool('test', 'rules', 'alerts.test.yml');
    expect(test.output).toContain('SUCCESS');
    expect(test.status).toBe(0);
    // the rule tests speak of every alert
    const tests = readFileSync(`${dashboards}alerts.test.yml`, 'utf8');
    for (const { alert } of alerts) expect(tests, alert).toContain(`alertname: ${alert}`);
  });
});
