/**
 * The rules-file workflow against a real rules API process (its own Postgres database):
 * idempotent apply, dry-run, conflicts, prune, export round trip, invalid files, tokens.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Rule, RuleInput, RuleInputV1 } from '@sluice/shared';
import { REPO_ROOT, startRulesApi, type TestRulesApi } from '@sluice/test-support';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { type CliIo, EXIT } from './cli.js';
import { RulesApiClient } from './client.js';
import { type CliRun, runCliCaptured } from './test-run-cli.js';

let api: TestRulesApi;
let client: RulesApiClient;
let dir: string;

beforeAll(async () => {
  api = await startRulesApi();
  client = new RulesApiClient({ url: api.url, token: api.adminToken });
  dir = await mkdtemp(join(tmpdir(), 'sluice-cli-'));
}, 60_000);

afterAll(async () => {
  await api?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  for (const rule of await client.listRules()) await client.deleteRule(rule.id);
});

function cli(args: string[], extra: Partial<Omit<CliIo, 'stdout' | 'stderr'>> = {}): Promise<CliRun> {
  return runCliCaptured(args, {
    env: { RULES_API_URL: api.url, RULES_API_TOKEN: api.adminToken },
    cwd: dir,
    ...extra,
  });
}

let fileCount = 0;
async function rulesFile(rules: unknown[], ext = 'yaml'): Promise<string> {
  const path = join(dir, `rules-${++fileCount}.${ext}`);
  await writeFile(path, ext === 'json' ? JSON.stringify({ rules }) : `# test file\n${toYaml(rules)}`);
  return path;
}

function toYaml(rules: unknown[]): string {
  // JSON is valid YAML flow syntax: good enough for a test file
  return `rules:\n${rules.map((r) => `  - ${JSON.stringify(r)}`).join('\n')}\n`;
}

async function snapshotVersion(): Promise<number> {
  const res = await fetch(`${api.url}/rules/snapshot`, {
    headers: { authorization: `Bearer ${api.adminToken}` },
  });
  return ((await res.json()) as { version: number }).version;
}

async function byName(): Promise<Record<string, Rule>> {
  return Object.fromEntries((await client.listRules()).map((r) => [r.name, r]));
}

const a: RuleInputV1 = {
  name: 'a',
  match: { path: '/a/**' },
  limit: { capacity: 5, refill: 5, period: '1m' },
};
const b: RuleInput = {
  name: 'b',
  description: 'per key, spelled loosely',
  match: { path: '/b', methods: ['POST', 'GET'], host: 'API.Example.com' },
  client: { by: 'header', name: 'X-Api-Key' },
  limit: { capacity: 10, refill: 1, period: '60s' },
  cost: 8,
};
const c: RuleInputV1 = {
  name: 'c',
  match: { path: '/c/*' },
  client: { by: 'global' },
  limit: { capacity: 100, refill: 10, period: 1500 },
};

/** A stacked rule spelled loosely (mixed-case names, ms durations), and an exemption above it. */
const stacked: RuleInput = {
  name: 'orders',
  match: { path: '/orders/**', headers: { 'X-Tier': 'free' }, notClientIps: ['10.0.0.0/8', '192.0.2.1'] },
  limits: [
    { name: 'burst', client: { by: 'header', name: 'X-Api-Key' }, capacity: 5, refill: 1, period: 1000 },
    {
      name: 'daily',
      client: { by: 'header', name: 'x-api-key' },
      algorithm: 'sliding-window',
      max: 1000,
      window: '24h',
    },
    { name: 'everyone', client: { by: 'global' }, capacity: 100, refill: 100, period: '1s', cost: 2 },
  ],
};
const partner: RuleInput = {
  name: 'orders-partner',
  match: { path: '/orders/**', clientIps: ['203.0.113.0/24'], caseInsensitive: true },
  unlimited: true,
  priority: 10,
};

describe('apply', () => {
  it('creates the rules, and a second apply of the same file changes nothing', async () => {
    const file = await rulesFile([a, b, c]);
    const first = await cli(['apply', file]);
    expect(first.code, first.stderr).toBe(EXIT.OK);
    expect(first.stdout).toContain('3 to create, 0 to update, 0 to delete, 0 unchanged.');
    const rules = await byName();
    expect(Object.keys(rules).sort()).toEqual(['a', 'b', 'c']);
    expect(rules.b).toMatchObject({ client: { by: 'header', name: 'x-api-key' }, cost: 8, maxDebt: 10 });

    const version = await snapshotVersion();
    const second = await cli(['apply', file]);
    expect(second.code).toBe(EXIT.OK);
    expect(second.stdout).toContain('0 to create, 0 to update, 0 to delete, 3 unchanged.');
    expect(second.stdout).toContain('Nothing to do.');
    expect(await snapshotVersion()).toBe(version);
    expect(await byName()).toEqual(rules);
  });

  it('applies a stacked rule and an exemption, and re-applies the same file as a no-op', async () => {
    const file = await rulesFile([stacked, partner, a]);
    const first = await cli(['apply', file]);
    expect(first.code, first.stderr).toBe(EXIT.OK);
    expect(first.stdout).toContain('3 to create');
    const rules = await byName();
    expect(rules.orders).toMatchObject({
      match: { headers: { 'x-tier': 'free' } },
      limits: [
        { name: 'burst', client: { by: 'header', name: 'x-api-key' }, algorithm: 'token-bucket', maxDebt: 5 },
        { name: 'daily', algorithm: 'sliding-window', window: '24h' },
        { name: 'everyone', client: { by: 'global' }, cost: 2 },
      ],
    });
    expect(rules['orders-partner']).toMatchObject({ unlimited: true, priority: 10 });

    const version = await snapshotVersion();
    const second = await cli(['apply', file]);
    expect(second.code, second.stderr).toBe(EXIT.OK);
    expect(second.stdout).toContain('0 to create, 0 to update, 0 to delete, 3 unchanged.');
    expect(await snapshotVersion()).toBe(version);
    expect(await byName()).toEqual(rules);
  });

  it('reads JSON files too', async () => {
    const result = await cli(['apply', await rulesFile([a, c], 'json')]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(Object.keys(await byName()).sort()).toEqual(['a', 'c']);
  });

  it('updates a changed rule guarded by its version and names the changed fields', async () => {
    await cli(['apply', await rulesFile([a, b])]);
    const before = await byName();
    const result = await cli(['apply', await rulesFile([{ ...a, limit: { ...a.limit, capacity: 50 } }, b])]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(result.stdout).toMatch(/~ update\s+a\s+\(limit\.capacity, maxDebt\)/);
    expect(result.stdout).toContain(`updated a (version ${before.a!.version + 1})`);
    const after = await byName();
    expect(after.a).toMatchObject({ limit: { capacity: 50 }, maxDebt: 50, version: before.a!.version + 1 });
    expect(after.b).toEqual(before.b);
  });

  it('with --prune deletes the rules the file does not name; without it keeps them', async () => {
    await cli(['apply', await rulesFile([a, b, c])]);
    const onlyA = await rulesFile([a]);
    const kept = await cli(['apply', onlyA]);
    expect(kept.stdout).toMatch(/· keep\s+b\s+\(not in the file; --prune deletes it\)/);
    expect(Object.keys(await byName()).sort()).toEqual(['a', 'b', 'c']);

    const pruned = await cli(['apply', '--prune', onlyA]);
    expect(pruned.code, pruned.stderr).toBe(EXIT.OK);
    expect(pruned.stdout).toContain('0 to create, 0 to update, 2 to delete, 1 unchanged.');
    expect(Object.keys(await byName())).toEqual(['a']);
  });

  it('with --create-only creates what is missing and leaves differing rules alone', async () => {
    await cli(['apply', await rulesFile([a])]);
    const before = await byName();
    const result = await cli(['apply', '--create-only', await rulesFile([{ ...a, cost: 3 }, b])]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(result.stdout).toMatch(/differs from the file; left as it is/);
    const after = await byName();
    expect(after.a).toEqual(before.a);
    expect(after.b).toBeDefined();
  });
});

describe('dry run', () => {
  it('prints the whole plan and writes nothing', async () => {
    await cli(['apply', await rulesFile([a, b, c])]);
    const before = await byName();
    const version = await snapshotVersion();
    const d: RuleInput = { ...a, name: 'd', match: { path: '/d' } };
    const result = await cli([
      'apply',
      '--dry-run',
      '--prune',
      await rulesFile([{ ...a, shadow: true }, b, d]),
    ]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(result.stdout).toMatch(/~ update\s+a\s+\(shadow\)/);
    expect(result.stdout).toMatch(/= unchanged b/);
    expect(result.stdout).toMatch(/- delete\s+c/);
    expect(result.stdout).toMatch(/\+ create\s+d/);
    expect(result.stdout).toContain('Dry run: nothing was written.');
    expect(await snapshotVersion()).toBe(version);
    expect(await byName()).toEqual(before);
  });
});

describe('dry run of stacked rules', () => {
  it('names what changed inside the limits and the conditions', async () => {
    await cli(['apply', await rulesFile([stacked, partner])]);
    const before = await byName();
    const limits = stacked.limits ?? [];
    const edited: RuleInput = {
      ...stacked,
      match: {
        ...stacked.match,
        headers: { 'x-tier': 'paid' },
        notClientIps: ['192.0.2.1/32', '10.0.0.0/8'],
      },
      limits: [
        { ...limits[0]!, capacity: 10, maxDebt: 5 },
        { ...limits[1]!, window: '1h' },
        {
          name: 'monthly',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'sliding-window',
          max: 9,
          window: '30d',
        },
        limits[2]!,
      ],
    };
    const result = await cli([
      'apply',
      '--dry-run',
      await rulesFile([edited, { ...partner, match: { ...partner.match, clientIps: ['203.0.113.0/25'] } }]),
    ]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(result.stdout).toMatch(
      /~ update\s+orders\s+\(match\.headers\.x-tier, limits\.burst\.capacity, limits\.daily\.window, limits\.monthly \(added\)\)/,
    );
    expect(result.stdout).toMatch(/~ update\s+orders-partner\s+\(match\.clientIps\)/);
    expect(await byName()).toEqual(before);
  });
});

describe('dry run of an algorithm change', () => {
  it('says that a limit changing algorithm under the same name starts its counters afresh', async () => {
    await cli(['apply', await rulesFile([stacked])]);
    const before = await byName();
    const limits = stacked.limits ?? [];
    const edited: RuleInput = {
      ...stacked,
      limits: [
        // burst: token bucket → sliding window; daily: sliding window → token bucket; everyone: as it was
        {
          name: 'burst',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'sliding-window',
          max: 5,
          window: '1s',
        },
        {
          name: 'daily',
          client: { by: 'header', name: 'x-api-key' },
          capacity: 1000,
          refill: 1000,
          period: '24h',
        },
        limits[2]!,
      ],
    };
    const result = await cli(['apply', '--dry-run', await rulesFile([edited])]);
    expect(result.code, result.stderr).toBe(EXIT.OK);
    expect(result.stdout).toContain(
      'limit `burst` changes algorithm: its counters start afresh (token-bucket → sliding-window)',
    );
    expect(result.stdout).toContain(
      'limit `daily` changes algorithm: its counters start afresh (sliding-window → token-bucket)',
    );
    expect(result.stdout).not.toContain('limit `everyone` changes algorithm');
    expect(await byName()).toEqual(before);

    // changing a limit's numbers keeps its counters: no such line
    const numbers = await cli([
      'apply',
      '--dry-run',
      await rulesFile([{ ...stacked, limits: [{ ...limits[0]!, capacity: 9 }, limits[1]!, limits[2]!] }]),
    ]);
    expect(numbers.stdout, numbers.stdout + numbers.stderr).toMatch(
      /~ update\s+orders\s+\(limits\.burst\.capacity/,
    );
    expect(numbers.stdout).not.toContain('changes algorithm');
  });
});

describe('conflicts', () => {
  it('reports a rule edited between plan and write, keeps the edit, and still applies the rest', async () => {
    await cli(['apply', await rulesFile([a, b, c])]);
    const file = await rulesFile([
      { ...a, limit: { ...a.limit, capacity: 50 } },
      { ...b, cost: 2 },
    ]);
    const result = await cli(['apply', '--prune', file], {
      afterPlan: async () => {
        // another admin edits "a" and "c" after the plan was made
        const now = await byName();
        await client.replaceRule(now.a!.id, { ...a, limit: { ...a.limit, capacity: 7 } });
        await client.replaceRule(now.c!.id, { ...c, enabled: false });
      },
    });
    expect(result.code).toBe(EXIT.CONFLICT);
    expect(result.stdout).toMatch(
      /CONFLICT update a: rule "a" changed on the server .*version 1, now version 2.*not overwritten/,
    );
    expect(result.stdout).toMatch(/CONFLICT delete c: .*not deleted/);
    expect(result.stdout).toContain('Applied: 1 written, 2 conflicts, 0 failed.');
    expect(result.stderr).toMatch(/left as they are/);
    const after = await byName();
    expect(after.a).toMatchObject({ limit: { capacity: 7 }, version: 2 });
    expect(after.c).toMatchObject({ enabled: false, version: 2 });
    expect(after.b).toMatchObject({ cost: 2, version: 2 });
  });

  it('does not re-create a rule deleted meanwhile, nor overwrite one created meanwhile', async () => {
    await cli(['apply', await rulesFile([a])]);
    const d: RuleInput = { ...a, name: 'd', match: { path: '/d' } };
    const result = await cli(['apply', await rulesFile([{ ...a, cost: 2 }, d])], {
      afterPlan: async () => {
        await client.deleteRule((await byName()).a!.id);
        await client.createRule({ ...d, cost: 9 });
      },
    });
    expect(result.code).toBe(EXIT.CONFLICT);
    expect(result.stdout).toMatch(/CONFLICT update a: .*deleted by someone else meanwhile; not re-created/);
    expect(result.stdout).toMatch(/CONFLICT create d: .*created by someone else meanwhile/);
    const after = await byName();
    expect(after.a).toBeUndefined();
    expect(after.d).toMatchObject({ cost: 9, version: 1 });
  });
});

describe('export', () => {
  it('exports every rule so that applying the export changes nothing, in YAML and JSON', async () => {
    const many: RuleInput[] = [
      b,
      c,
      { ...a, enabled: false, priority: -3, maxDebt: 0, description: 'with "quotes": and # hash' },
      {
        name: 'z.shadow_1',
        match: { path: '/' },
        limit: { capacity: 1.5, refill: 0.5, period: '1h' },
        shadow: true,
      },
      stacked,
      { ...partner, enabled: false },
    ];
    for (const rule of many) await client.createRule(rule);
    const version = await snapshotVersion();
    for (const format of ['yaml', 'json']) {
      const out = join(dir, `export.${format}`);
      const exported = await cli(['export', '--format', format, '-o', out]);
      expect(exported.code, exported.stderr).toBe(EXIT.OK);
      const again = await cli(['apply', '--prune', out]);
      expect(again.code, again.stderr).toBe(EXIT.OK);
      expect(again.stdout).toContain('0 to create, 0 to update, 0 to delete, 6 unchanged.');
    }
    expect(await snapshotVersion()).toBe(version);

    const stdout = await cli(['export']);
    const names = (parseYaml(stdout.stdout) as { rules: Array<{ name: string }> }).rules.map((r) => r.name);
    expect(names).toEqual(['a', 'b', 'c', 'orders', 'orders-partner', 'z.shadow_1']);
    expect(stdout.stdout).not.toMatch(/version|createdAt|id:/);
  });
});

describe('errors', () => {
  it('rejects an invalid file naming each bad field, and writes nothing', async () => {
    await cli(['apply', await rulesFile([a])]);
    const before = await byName();
    const file = await rulesFile([
      b,
      { ...c, limit: { ...c.limit, period: 'soon' } },
      { ...a, name: 'e', colour: 'blue' },
      { ...a, name: 'f', client: { by: 'header' } },
    ]);
    const result = await cli(['apply', '--prune', file]);
    expect(result.code).toBe(EXIT.ERROR);
    expect(result.stderr).toContain('rules[1] (c).limit.period');
    expect(result.stderr).toContain('rules[2] (e).colour: is not a known field');
    expect(result.stderr).toContain('rules[3] (f).client.name');
    expect(result.stderr).toContain('Nothing was written.');
    expect(result.stdout).toBe('');
    expect(await byName()).toEqual(before);
  });

  it('reports a read-only token and a wrong token, and writes nothing', async () => {
    const file = await rulesFile([a]);
    const readOnly = await cli(['apply', file], {
      env: { RULES_API_URL: api.url, RULES_API_TOKEN: api.readToken },
    });
    expect(readOnly.code).toBe(EXIT.ERROR);
    expect(readOnly.stdout).toMatch(/FAILED create a: POST \/rules → 403: .*writes need the admin token/);
    const wrong = await cli(['export', '--token', 'nope', '--url', api.url]);
    expect(wrong.code).toBe(EXIT.ERROR);
    expect(wrong.stderr).toMatch(/GET \/rules → 401: .*RULES_API_TOKEN/);
    expect(await client.listRules()).toEqual([]);
  });
});

describe('pnpm rules', () => {
  function pnpmRules(args: string[], cwd: string): Promise<CliRun> {
    return new Promise((resolve, reject) => {
      // -w: the `rules` script is the workspace root's, also when run from a package directory
      const child = spawn('pnpm', ['-w', '-s', 'rules', ...args], {
        cwd,
        env: { ...process.env, RULES_API_URL: api.url, RULES_API_TOKEN: api.adminToken },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      child.once('error', reject);
      child.once('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
  }

  it('runs the CLI with `pnpm -w rules` from any directory of the repository, resolving paths from there', async () => {
    const applied = await pnpmRules(['apply', 'demo-rules.yaml'], `${REPO_ROOT}apps/demo`);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain('8 to create');
    const exported = await pnpmRules(['export'], REPO_ROOT);
    expect(exported.code, exported.stderr).toBe(0);
    const rules = (parseYaml(exported.stdout) as { rules: RuleInput[] }).rules;
    expect(rules.map((r) => r.name)).toEqual([
      'demo-account',
      'demo-account-pro',
      'demo-expensive',
      'demo-global',
      'demo-orders',
      'demo-orders-partner',
      'demo-per-ip',
      'demo-shadow',
    ]);
  });
});
