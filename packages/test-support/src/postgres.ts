/**
 * A fresh Postgres database per test file (files run in parallel), dropped afterwards. Needs the
 * Postgres of the test machine: 127.0.0.1:5432, user postgres, trust auth (or TEST_POSTGRES_URL).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const ADMIN_DATABASE_URL =
  process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  name: string;
  url: string;
  /** runs one statement on the test database (assertions on tables) */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]>;
  /** drops the database, closing every connection to it */
  drop(): Promise<void>;
}

async function onAdmin<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** The URL of database `name` on the test server. */
export function databaseUrl(name: string): string {
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

/** `prefix`: lower case letters, digits and `_`; a random suffix keeps parallel files apart. */
export async function createTestDatabase(prefix = 'sluice_test'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await onAdmin((c) => c.query(`CREATE DATABASE "${name}"`));
  const url = databaseUrl(name);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  return {
    name,
    url,
    query: async (text, values) => (await pool.query(text, values)).rows,
    drop: async () => {
      await pool.end();
      await onAdmin(async (c) => {
        // A pool's end() can resolve while its connections are still closing; FORCE would then
        // terminate them mid-goodbye and their client, no longer listening, throws. Let them go first.
        for (let i = 0; i < 50; i++) {
          const { rows } = await c.query(
            'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
            [name],
          );
          if (rows[0].n === 0) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      });
    },
  };
}
