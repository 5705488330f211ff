/**
 * Migrations: idempotent, safe when several processes start together (advisory lock), all or
 * nothing when one fails (and the process exits non-zero), and the same on PGlite.
 */
import { spawn } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, type TestDatabase } from '@sluice/test-support';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/client.js';
import { defaultMigrationsDir, MigrationError, migrateDatabase } from '../src/db/migrate.js';
import { admin, ruleInput, startApp } from './support/app.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const journal = JSON.parse(await readFile(path.join(defaultMigrationsDir(), 'meta/_journal.json'), 'utf8'));
const MIGRATION_COUNT: number = journal.entries.length;

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

async function freshDatabase(): Promise<TestDatabase> {
  const db = await createTestDatabase('sluice_migrate');
  cleanups.push(() => db.drop());
  return db;
}

/** Runs `src/migrate-cli.ts` in a child process; resolves with its exit code and output. */
function runMigrateCli(env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--conditions=sluice-source', '--import', 'tsx', 'src/migrate-cli.ts'],
      { cwd: packageDir, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function appliedMigrations(db: TestDatabase) {
  return db.query('SELECT hash FROM drizzle.__drizzle_migrations');
}

async function tables(db: TestDatabase) {
  const rows = await db.query<{ table_name: string }>(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name",
  );
  return rows.map((r) => r.table_name);
}

describe('migrations on Postgres', () => {
  it('apply once, and a second run changes nothing', async () => {
    const db = await freshDatabase();
    const database = await openDatabase({ databaseUrl: db.url, dataDir: '', timeoutMs: 2_000 });
    try {
      await migrateDatabase(database);
      expect(await tables(db)).toEqual(['rule_history', 'rules', 'ruleset_version']);
      await db.query(
        `INSERT INTO rules (name, enabled, priority, definition)
         VALUES ('kept', true, 0, '{"name":"kept","match":{"path":"/"},"limit":{"capacity":1,"refill":1,"period":"1s"}}')`,
      );
      await migrateDatabase(database);
      expect(await appliedMigrations(db)).toHaveLength(MIGRATION_COUNT);
      expect(await db.query('SELECT name FROM rules')).toEqual([{ name: 'kept' }]);
    } finally {
      await database.close();
    }
  });

  it('three processes migrating one fresh database at once all exit 0, applying each migration once', async () => {
    const db = await freshDatabase();
    const runs = await Promise.all([1, 2, 3].map(() => runMigrateCli({ DATABASE_URL: db.url })));
    for (const run of runs) expect(run.code, run.stderr).toBe(0);
    expect(await appliedMigrations(db)).toHaveLength(MIGRATION_COUNT);
    expect(await tables(db)).toEqual(['rule_history', 'rules', 'ruleset_version']);
  });

  it('a failing migration rolls back, throws MigrationError, and the CLI and server exit 1', async () => {
    const db = await freshDatabase();
    const dir = await mkdtemp(path.join(tmpdir(), 'sluice-bad-migrations-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    const broken = {
      idx: journal.entries.length,
      version: '7',
      when: Date.now(),
      tag: '9999_broken',
      breakpoints: true,
    };
    await writeFile(
      path.join(dir, 'meta/_journal.json'),
      JSON.stringify({ ...journal, entries: [...journal.entries, broken] }),
    );
    await writeFile(
      path.join(dir, '9999_broken.sql'),
      'CREATE TABLE half_done (id int);\n--> statement-breakpoint\nSELECT * FROM no_such_table;',
    );

    const database = await openDatabase({ databaseUrl: db.url, dataDir: '', timeoutMs: 2_000 });
    try {
      await expect(migrateDatabase(database, { migrationsDir: dir })).rejects.toBeInstanceOf(MigrationError);
    } finally {
      await database.close();
    }
    // drizzle applies pending migrations in one transaction: nothing of the run is left.
    expect(await tables(db)).toEqual([]);

    const cli = await runMigrateCli({ DATABASE_URL: db.url, MIGRATIONS_DIR: dir });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain('no_such_table');

    const server = await runServer({
      DATABASE_URL: db.url,
      MIGRATIONS_DIR: dir,
      ADMIN_TOKEN: 'x',
      PORT: '0',
    });
    expect(server.code).toBe(1);
    expect(server.stderr).toContain('startup failed: migrations');
  });
});

function runServer(env: Record<string, string>) {
  return new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'],
      {
        cwd: packageDir,
        env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', ...env },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

describe('migrations on PGlite', () => {
  it('apply at start, again on restart, and the data persists in DATA_DIR', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'sluice-pglite-migrate-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const backend = { env: { DATA_DIR: dir }, cleanup: async () => {} };

    const first = await startApp(backend);
    const created = await first.inject({
      method: 'POST',
      url: '/rules',
      headers: admin,
      payload: ruleInput(),
    });
    expect(created.statusCode).toBe(201);
    await first.close();

    const second = await startApp(backend);
    try {
      const again = await second.inject({
        method: 'GET',
        url: `/rules/${created.json().id}`,
        headers: admin,
      });
      expect(again.json()).toEqual(created.json());
      const applied = await second.database.pglite!.query('SELECT hash FROM drizzle.__drizzle_migrations');
      expect(applied.rows).toHaveLength(MIGRATION_COUNT);
    } finally {
      await second.close();
    }
  });
});
