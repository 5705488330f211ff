/** The helpers the apps' tests stand on: a database of their own that is really gone afterwards, and a rules API process. */
import pg from 'pg';
import { expect, it } from 'vitest';
import { ADMIN_DATABASE_URL, createTestDatabase, freePort, startRulesApi } from './index.js';

async function databaseExists(name: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  try {
    return (await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1;
  } finally {
    await client.end();
  }
}

const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

it('creates a database with the prefix that answers queries, and drop() removes it', async () => {
  const db = await createTestDatabase('test_support');
  expect(db.name).toMatch(/^test_support_[0-9a-f]{12}$/);
  expect(db.url).toMatch(new RegExp(`/${db.name}$`));
  expect(await db.query<{ n: number }>('SELECT $1::int AS n', [7])).toEqual([{ n: 7 }]);
  await db.drop();
  expect(await databaseExists(db.name)).toBe(false);
});

it('starts a rules API that takes its tokens; kill() keeps the database, stop() drops it', async () => {
  const port = await freePort();
  const api = await startRulesApi({ port, adminToken: 'the-admin', databasePrefix: 'test_support_api' });
  expect(api.url).toBe(`http://127.0.0.1:${port}`);
  expect(api.adminToken).toBe('the-admin');
  expect((await fetch(`${api.url}/rules`, bearer(api.readToken))).status).toBe(200);
  expect((await fetch(`${api.url}/rules`, bearer('wrong'))).status).toBe(401);
  const created = await fetch(`${api.url}/rules`, {
    method: 'POST',
    headers: { ...bearer(api.adminToken).headers, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'r',
      match: { path: '/r' },
      limit: { capacity: 1, refill: 1, period: '1s' },
    }),
  });
  expect(created.status).toBe(201);

  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  const names = await client.query<{ datname: string }>(
    "SELECT datname FROM pg_database WHERE datname LIKE 'test_support_api_%'",
  );
  await client.end();
  const mine = names.rows.map((r) => r.datname);
  expect(mine).toHaveLength(1);

  await api.kill();
  await expect(fetch(`${api.url}/readyz`)).rejects.toThrow();
  expect(await databaseExists(mine[0]!)).toBe(true);
  await api.stop();
  expect(await databaseExists(mine[0]!)).toBe(false);
}, 60_000);

it('fails with what the process printed when it cannot start, and leaves no database behind', async () => {
  await expect(
    startRulesApi({ env: { DATABASE_URL: 'mysql://nope' }, databasePrefix: 'test_support_bad' }),
  ).rejects.toThrow(/rules API exited with 1:[\s\S]*DATABASE_URL: must start with postgres/);
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  const left = await client.query("SELECT 1 FROM pg_database WHERE datname LIKE 'test\\_support\\_bad\\_%'");
  await client.end();
  expect(left.rowCount).toBe(0);
}, 60_000);
