/**
 * The Grafana dashboard (dashboards/grafana/sluice-gateway.json) queries only metrics the gateway
 * really exports, with labels those metrics really have: a renamed metric or label fails here, not as
 * an empty panel in production.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GatewayMetrics } from './metrics.js';

interface Panel {
  title: string;
  targets?: { expr: string }[];
}
const dashboard = JSON.parse(
  readFileSync(new URL('../../../../dashboards/grafana/sluice-gateway.json', import.meta.url), 'utf8'),
) as { panels: Panel[]; templating: { list: { definition?: string }[] } };

const exprs = [
  ...dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((t) => ({ where: panel.title, expr: t.expr })),
  ),
  ...dashboard.templating.list.flatMap((v) =>
    v.definition ? [{ where: 'variables', expr: v.definition }] : [],
  ),
];

/** name → label names, from the gateway's own registry (histograms also as _bucket/_sum/_count). */
async function exported(): Promise<Map<string, Set<string>>> {
  const metrics = new GatewayMetrics({ defaultMetrics: false });
  const names = new Map<string, Set<string>>();
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    const single = metrics.registry.getSingleMetric(metric.name) as unknown as { labelNames?: string[] };
    const labels = new Set(single.labelNames ?? []);
    names.set(metric.name, labels);
    if (String(metric.type) === 'histogram') {
      names.set(`${metric.name}_bucket`, new Set([...labels, 'le']));
      names.set(`${metric.name}_sum`, labels);
      names.set(`${metric.name}_count`, labels);
    }
  }
  return names;
}

/** Labels Prometheus adds to every scraped series. */
const TARGET_LABELS = new Set(['instance', 'job']);

describe('the Grafana dashboard', () => {
  it('has panels for every area the gateway reports on', () => {
    const all = exprs.map((e) => e.expr).join('\n');
    for (const name of [
      'sluice_requests_total',
      'sluice_decision_duration_seconds_bucket',
      'sluice_store_errors_total',
      'sluice_store_fallbacks_total',
      'sluice_store_breaker_state',
      'sluice_denials_cached_total',
      'sluice_rules_age_seconds',
      'sluice_rules_version',
      'sluice_upstream_errors_total',
    ]) {
      expect(all).toContain(name);
    }
  });

  it('draws real denials (429s) and shadow would-be denials apart, never summed into one series', () => {
    const decisionsOf = (expr: string) => /decision(=~?)"([^"]*)"/.exec(expr);
    const real = exprs.filter(({ expr }) => decisionsOf(expr)?.[2] === 'denied');
    const shadow = exprs.filter(({ expr }) => decisionsOf(expr)?.[2] === 'shadow_denied');
    expect(real.map((e) => e.where)).toEqual(['Denied by rule: 429s (req/s)']);
    expect(shadow.map((e) => e.where)).toEqual(['Shadow rules: would-be denials (req/s)']);
    // a matcher taking both decisions is only fine where the series stay split by decision
    const mixed = exprs.filter(({ expr }) => {
      if (expr.startsWith('label_values(')) return false; // a variable's values, not a series drawn
      const matcher = decisionsOf(expr);
      const takesBoth =
        matcher === null
          ? expr.includes('sluice_requests_total')
          : matcher[1] === '=~' &&
            new RegExp(`^(?:${matcher[2]})$`).test('denied') &&
            new RegExp(`^(?:${matcher[2]})$`).test('shadow_denied');
      return takesBoth && !/by \([^)]*\bdecision\b/.test(expr);
    });
    expect(mixed.map((e) => e.where)).toEqual([]);
  });

  it('queries only metric names the gateway exports', async () => {
    const names = await exported();
    const unknown = exprs.flatMap(({ where, expr }) =>
      [...expr.matchAll(/\bsluice_[a-z_]+\b/g)]
        .map((m) => m[0])
        .filter((n) => !names.has(n))
        .map((n) => `${where}: ${n}`),
    );
    expect(exprs.length).toBeGreaterThan(10);
    expect(unknown).toEqual([]);
  });

  it('groups and filters only by labels those metrics have', async () => {
    const names = await exported();
    const problems: string[] = [];
    for (const { where, expr } of exprs) {
      const metricLabels = new Set(TARGET_LABELS);
      for (const m of expr.matchAll(/\bsluice_[a-z_]+\b/g))
        for (const l of names.get(m[0]) ?? []) metricLabels.add(l);
      const used = [
        ...[...expr.matchAll(/\bby \(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((s) => s.trim())),
        ...[...expr.matchAll(/[{,]\s*([a-z_]+)\s*(?:=~|!=|!~|=)/g)].map((m) => m[1]!),
        ...[...expr.matchAll(/label_values\([a-z_]+, ([a-z_]+)\)/g)].map((m) => m[1]!),
      ];
      for (const label of used) if (!metricLabels.has(label)) problems.push(`${where}: ${label}`);
    }
    expect(problems).toEqual([]);
  });
});
