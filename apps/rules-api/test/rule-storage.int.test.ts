/**
 * How rules are stored, on Postgres and PGlite: one JSON definition per rule, so rules of any shape
 * (format v2, fields not invented yet) round-trip without a migration, in the key order they were
 * stored in; rules of format v1 come back exactly as before; and a database written by the first
 * migration keeps its rules and history through the migrations that changed the table.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Rule, RuleFields } from '@sluice/shared';
import { createTestDatabase } from '@sluice/test-support';
import { sql } from 'drizzle-orm';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { type Database, openDatabase } from '../src/db/client.js';
import { defaultMigrationsDir, migrateDatabase } from '../src/db/migrate.js';
import { RulesRepository } from '../src/rules/repository.js';
import { admin, testConfig } from './support/app.js';

interface Opened {
  database: Database;
  cleanup(): Promise<void>;
}

const BACKENDS: Array<[string, () => Promise<Opened>]> = [
  [
    'Postgres',
    async () => {
      const db = await createTestDatabase('sluice_storage');
      const database = await openDatabase({ databaseUrl: db.url, dataDir: '', timeoutMs: 5_000 });
      return {
        database,
        cleanup: async () => {
          await database.close();
          await db.drop();
        },
      };
    },
  ],
  [
    'PGlite',
    async () => {
      const database = await openDatabase({ databaseUrl: undefined, dataDir: 'memory://', timeoutMs: 5_000 });
      return { database, cleanup: () => database.close() };
    },
  ],
];

/** A copy of `migrations/` that stops after the first migration: the table as it was first shipped. */
async function firstMigrationOnly(): Promise<{ dir: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sluice-first-migration-'));
  await cp(defaultMigrationsDir(), dir, { recursive: true });
  const journalPath = path.join(dir, 'meta/_journal.json');
  const journal = JSON.parse(await readFile(journalPath, 'utf8'));
  await writeFile(journalPath, JSON.stringify({ ...journal, entries: journal.entries.slice(0, 1) }));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

const serverFields = (rule: Rule) => {
  const { id, version, createdAt, updatedAt, ...definition } = rule;
  return { server: { id, version, createdAt, updatedAt }, definition };
};

/** A rule of format v2 (what the schema helper adds), keys in the stored order, plus a field no one has yet. */
const STACKED = {
  name: 'stacked',
  description: 'burst and daily per key, one cap for everyone',
  match: {
    path: '/orders/**',
    methods: ['POST'],
    headers: { 'x-tier-of-client': 'free', ab: 'x' },
    clientIps: ['203.0.113.0/24', '2001:db8::/32'],
  },
  limits: [
    {
      name: 'burst',
      client: { by: 'header', name: 'x-api-key' },
      algorithm: 'token-bucket',
      capacity: 20,
      refill: 10,
      period: '1s',
      maxDebt: 20,
    },
    { name: 'daily', client: { by: 'ip' }, algorithm: 'sliding-window', max: 10_000, window: '1d' },
    { name: 'inflight', client: { by: 'global' }, algorithm: 'concurrency', max: 5 },
  ],
  cost: 1,
  charge: { from: 'header', header: 'x-sluice-cost', max: 100 },
  refund: { statuses: ['5xx', 429] },
  mode: 'exact',
  enabled: true,
  shadow: false,
  priority: 5,
  // jsonb would reorder these keys (shorter first); the definition keeps them as written
  notInventedYet: { zebra: 1, a: [{ yy: 2, b: 3 }] },
};

const EXEMPTION = {
  name: 'partner',
  match: { path: '/**', notClientIps: ['198.51.100.7'] },
  unlimited: true,
  enabled: true,
  shadow: false,
  priority: 100,
};

describe.each(BACKENDS)('rule storage on %s', (_label, open) => {
  let opened: Opened;
  beforeAll(async () => {
    opened = await open();
  });
  afterAll(async () => {
    await opened?.cleanup();
  });

  describe('a database created by the first migration, with rules in it', () => {
    let app: FastifyInstance;
    const alphaId = '0b6f3c1e-0000-4000-8000-000000000001';
    const betaId = '0b6f3c1e-0000-4000-8000-000000000002';
    const goneId = '0b6f3c1e-0000-4000-8000-000000000003';
    // Rules as the API returned them before the change, in the order it returned them.
    const alpha = {
      id: alphaId,
      name: 'alpha',
      description: 'Order API, per API key',
      match: { path: '/orders/**', methods: ['GET', 'POST'], host: 'api.example.com' },
      client: { by: 'header', name: 'x-api-key' },
      limit: { capacity: 100, refill: 100, period: '1m' },
      cost: 1,
      maxDebt: 100,
      enabled: true,
      shadow: false,
      priority: 0,
      version: 3,
      createdAt: '2026-11-25T12:00:00.000Z',
      updatedAt: '2026-11-25T12:30:00.000Z',
    };
    const beta = {
      id: betaId,
      name: 'beta',
      match: { path: '/' },
      client: { by: 'ip' },
      limit: { capacity: 1.5, refill: 0.25, period: 60_000 },
      cost: 0.5,
      maxDebt: 0,
      enabled: false,
      shadow: true,
      priority: -3,
      version: 1,
      createdAt: '2026-11-25T13:00:00.000Z',
      updatedAt: '2026-11-25T13:00:00.000Z',
    };
    const gone = { ...beta, id: goneId, name: 'gone', version: 1 };

    beforeAll(async () => {
      const first = await firstMigrationOnly();
      try {
        await migrateDatabase(opened.database, { migrationsDir: first.dir });
      } finally {
        await first.cleanup();
      }
      const jsonb = (value: unknown) => sql`${JSON.stringify(value)}::jsonb`;
      const row = (r: typeof alpha | typeof beta) => sql`(
        ${r.id}::uuid, ${r.name}, ${'description' in r ? r.description : null}, ${jsonb(r.match)},
        ${jsonb(r.client)}, ${jsonb(r.limit)}, ${r.cost}, ${r.maxDebt}, ${r.enabled}, ${r.shadow},
        ${r.priority}, ${r.version}, ${r.createdAt}::timestamptz, ${r.updatedAt}::timestamptz)`;
      const db = opened.database.db;
      // What the repository of the first migration wrote, column by column.
      await db.execute(sql`INSERT INTO rules (id, name, description, match, client, "limit", cost,
        max_debt, enabled, shadow, priority, version, created_at, updated_at)
        VALUES ${row(alpha)}, ${row(beta)}`);
      const history: Array<[string, number, string, unknown, number]> = [
        [alphaId, 1, 'create', { ...alpha, version: 1, updatedAt: alpha.createdAt }, 1],
        [betaId, 1, 'create', beta, 2],
        [goneId, 1, 'create', gone, 3],
        [alphaId, 2, 'update', { ...alpha, version: 2, priority: 9 }, 4],
        [alphaId, 3, 'update', alpha, 5],
        [goneId, 2, 'delete', gone, 6],
      ];
      for (const [ruleId, version, action, rule, rulesetVersion] of history) {
        await db.execute(sql`INSERT INTO rule_history (rule_id, version, action, actor, rule, ruleset_version)
          VALUES (${ruleId}::uuid, ${version}, ${action}, 'admin', ${jsonb(rule)}, ${rulesetVersion})`);
      }
      await db.execute(sql`INSERT INTO ruleset_version (id, version) VALUES (1, 6)`);

      await migrateDatabase(opened.database);
      app = await buildApp(testConfig(), { database: opened.database, skipMigrations: true });
    });
    afterAll(async () => {
      await app?.close();
    });

    const get = (url: string) => app.inject({ method: 'GET', url, headers: admin });

    it('returns the same rules, byte for byte in the snapshot', async () => {
      const snapshot = await get('/rules/snapshot');
      expect(snapshot.body).toBe(JSON.stringify({ version: 6, rules: [alpha, beta] }));
      expect((await get(`/rules/${alphaId}`)).json()).toEqual(alpha);
      expect((await get(`/rules/${alphaId}`)).headers.etag).toBe('"3"');
      expect((await get('/rules')).json()).toEqual({
        items: [alpha, beta],
        nextCursor: null,
        summaries: {
          [alphaId]: ['100 per x-api-key, 100 more every 1m (token bucket)'],
          [betaId]: ['1.5 per client IP, 0.25 more every 60000ms (token bucket)'],
        },
      });
    });

    it('returns the same history, also of a deleted rule', async () => {
      const alphaHistory = (await get(`/rules/${alphaId}/history`)).json();
      expect(alphaHistory.items.map((i: { version: number }) => i.version)).toEqual([3, 2, 1]);
      expect(alphaHistory.items[0].rule).toEqual(alpha);
      expect(alphaHistory.items[1].rule).toEqual({ ...alpha, version: 2, priority: 9 });
      const goneHistory = (await get(`/rules/${goneId}/history`)).json();
      expect(goneHistory.items.map((i: { action: string }) => i.action)).toEqual(['delete', 'create']);
      expect(goneHistory.items[0].rule).toEqual(gone);
      // entries written as jsonb come back in the rule's key order
      const page = await new RulesRepository(opened.database).history(alphaId, { limit: 1 });
      expect(JSON.stringify(page!.items[0]!.rule)).toBe(JSON.stringify(alpha));
    });

    it('keeps working: a migrated rule can be replaced, and its history grows', async () => {
      const { id, version, createdAt, updatedAt, ...fields } = alpha;
      const put = await app.inject({
        method: 'PUT',
        url: `/rules/${alphaId}`,
        headers: { ...admin, 'if-match': '"3"' },
        payload: { ...fields, priority: 1 },
      });
      expect(put.statusCode, put.body).toBe(200);
      expect(put.json()).toMatchObject({ priority: 1, version: 4, createdAt });
      const history = (await get(`/rules/${alphaId}/history`)).json();
      expect(history.items.map((i: { version: number }) => i.version)).toEqual([4, 3, 2, 1]);
      expect((await get('/rules/snapshot')).json().version).toBe(7);
    });
  });

  describe('the repository', () => {
    let repository: RulesRepository;
    beforeAll(async () => {
      await migrateDatabase(opened.database);
      repository = new RulesRepository(opened.database);
    });

    it('round-trips rules of format v2 and unknown fields as stored, in their key order', async () => {
      const { rule: created } = await repository.create(STACKED as unknown as RuleFields, 'admin');
      const { rule: exempt } = await repository.create(EXEMPTION as unknown as RuleFields, 'admin');
      for (const [rule, stored] of [
        [created, STACKED],
        [exempt, EXEMPTION],
      ] as const) {
        const { server, definition } = serverFields(rule);
        expect(JSON.stringify(definition)).toBe(JSON.stringify(stored));
        expect(Object.keys(rule)[0]).toBe('id');
        expect(Object.keys(rule).slice(-3)).toEqual(['version', 'createdAt', 'updatedAt']);
        expect(server.version).toBe(1);
        expect(JSON.stringify(await repository.get(rule.id))).toBe(JSON.stringify(rule));
      }
      const listed = await repository.list({ limit: 1000 });
      expect(JSON.stringify(listed.items.find((r) => r.id === created.id))).toBe(JSON.stringify(created));
      const snapshot = await repository.snapshot();
      expect(JSON.stringify(snapshot.rules.find((r) => r.id === exempt.id))).toBe(JSON.stringify(exempt));

      const changed = { ...STACKED, limits: STACKED.limits.slice(0, 1), priority: 6 };
      const { rule: replaced } = await repository.replace(
        created.id,
        changed as unknown as RuleFields,
        undefined,
        'admin',
      );
      expect(JSON.stringify(serverFields(replaced).definition)).toBe(JSON.stringify(changed));
      await repository.delete(created.id, undefined, 'admin');
      const history = await repository.history(created.id, { limit: 10 });
      expect(history!.items.map((i) => [i.action, i.version])).toEqual([
        ['delete', 3],
        ['update', 2],
        ['create', 1],
      ]);
      expect(JSON.stringify(history!.items[2]!.rule)).toBe(JSON.stringify(created));
      expect(JSON.stringify(history!.items[0]!.rule)).toBe(JSON.stringify(replaced));
    });

    it('stores a v1 rule in the order the API has always used, whatever order it was given in', async () => {
      const scrambled = {
        priority: 2,
        shadow: false,
        enabled: true,
        maxDebt: 2,
        cost: 1,
        limit: { period: '1s', refill: 1, capacity: 2 },
        client: { name: 'x-key', by: 'header' },
        match: { host: 'api.example.com', methods: ['GET'], path: '/x' },
        description: 'd',
        name: 'scrambled',
      };
      const { rule } = await repository.create(scrambled as unknown as RuleFields, 'admin');
      expect(JSON.stringify(serverFields(rule).definition)).toBe(
        JSON.stringify({
          name: 'scrambled',
          description: 'd',
          match: { path: '/x', methods: ['GET'], host: 'api.example.com' },
          client: { by: 'header', name: 'x-key' },
          limit: { capacity: 2, refill: 1, period: '1s' },
          cost: 1,
          maxDebt: 2,
          enabled: true,
          shadow: false,
          priority: 2,
        }),
      );
    });
  });
});
