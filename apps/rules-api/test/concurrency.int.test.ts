/**
 * Racing writers over real HTTP on Postgres: optimistic concurrency (exactly one winner), unique
 * names, and a snapshot version that never goes back and always matches the rules it comes with,
 * across two replicas of the API on the same database.
 */
import type { Rule } from '@sluice/shared';
import { createTestDatabase, type TestDatabase } from '@sluice/test-support';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, admin, ruleInput, startApp } from './support/app.js';

let db: TestDatabase;
let replicaA: FastifyInstance;
let replicaB: FastifyInstance;
let urlA: string;
let urlB: string;

const json = { ...admin, 'content-type': 'application/json' };

async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...json, ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, etag: res.headers.get('etag'), body: text ? JSON.parse(text) : undefined };
}

/**
 * A snapshot that reflects every committed write: a tag newer than the replica's cached version
 * makes it ask the database (a plain GET may be up to SNAPSHOT_CACHE_MS old by design).
 */
async function freshSnapshot(base: string) {
  return (await call(base, 'GET', '/rules/snapshot', undefined, { 'if-none-match': '"999999999"' })).body;
}

function tally(statuses: number[]) {
  const counts: Record<number, number> = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  return counts;
}

beforeAll(async () => {
  db = await createTestDatabase();
  replicaA = await startApp({ env: { DATABASE_URL: db.url }, cleanup: async () => {} });
  // Replica B trusts its cached version for 5 s, so its cache is surely stale when a test wants it.
  replicaB = await startApp(
    { env: { DATABASE_URL: db.url }, cleanup: async () => {} },
    { SNAPSHOT_CACHE_MS: '5000' },
  );
  urlA = await replicaA.listen({ port: 0, host: '127.0.0.1' });
  urlB = await replicaB.listen({ port: 0, host: '127.0.0.1' });
});

afterAll(async () => {
  await replicaA?.close();
  await replicaB?.close();
  await db?.drop();
});

describe('concurrent writers', () => {
  it('20 concurrent PUTs with the same If-Match: exactly one 200 and nineteen 412', async () => {
    for (let round = 0; round < 3; round++) {
      const rule = (await call(urlA, 'POST', '/rules', ruleInput())).body as Rule;
      const v0 = (await freshSnapshot(urlA)).version;
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          call(i % 2 ? urlA : urlB, 'PUT', `/rules/${rule.id}`, ruleInput({ name: rule.name, priority: i }), {
            'if-match': '"1"',
          }),
        ),
      );
      expect(tally(results.map((r) => r.status))).toEqual({ 200: 1, 412: 19 });
      const winner = results.find((r) => r.status === 200)!;
      const stored = (await call(urlA, 'GET', `/rules/${rule.id}`)).body as Rule;
      expect(stored.version).toBe(2);
      expect(stored.priority).toBe(winner.body.priority);
      const history = (await call(urlA, 'GET', `/rules/${rule.id}/history`)).body.items;
      expect(history.map((h: { action: string }) => h.action)).toEqual(['update', 'create']);
      const v1 = (await freshSnapshot(urlA)).version;
      expect(v1).toBe(v0 + 1);
    }
  });

  it('20 concurrent creates of one name: exactly one 201, nineteen 409', async () => {
    const input = ruleInput();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call(i % 2 ? urlA : urlB, 'POST', '/rules', input)),
    );
    expect(tally(results.map((r) => r.status))).toEqual({ 201: 1, 409: 19 });
    const rows = await db.query('SELECT id FROM rules WHERE name = $1', [input.name]);
    expect(rows).toHaveLength(1);
    const history = await db.query('SELECT action FROM rule_history WHERE rule_id = $1', [rows[0]!.id]);
    expect(history).toHaveLength(1);
  });

  it('20 concurrent DELETEs with the same If-Match: exactly one 204, the others 404', async () => {
    const rule = (await call(urlA, 'POST', '/rules', ruleInput())).body as Rule;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(i % 2 ? urlA : urlB, 'DELETE', `/rules/${rule.id}`, undefined, { 'if-match': '"1"' }),
      ),
    );
    expect(tally(results.map((r) => r.status))).toEqual({ 204: 1, 404: 19 });
    const history = await db.query('SELECT action FROM rule_history WHERE rule_id = $1 ORDER BY id', [
      rule.id,
    ]);
    expect(history.map((h) => h.action)).toEqual(['create', 'delete']);
  });
});

describe('snapshot version under concurrent writes', () => {
  it('never goes back, and every snapshot has exactly the changes its version counts', async () => {
    const initial = await freshSnapshot(urlA);
    const v0: number = initial.version;
    const sum = (rules: Rule[]) => rules.reduce((s, r) => s + r.version, 0);
    // Only creates and updates below: each adds exactly 1 to the sum of rule versions.
    const baseSum = sum(initial.rules);

    let writing = true;
    let committed = 0;
    const writer = async (w: number) => {
      const target = w % 2 ? urlA : urlB;
      const created = await call(target, 'POST', '/rules', ruleInput());
      expect(created.status).toBe(201);
      committed += 1;
      for (let i = 0; i < 12; i++) {
        const res = await call(
          target,
          'PUT',
          `/rules/${created.body.id}`,
          ruleInput({ name: created.body.name }),
        );
        expect(res.status).toBe(200);
        committed += 1;
      }
    };
    const observed: Array<{ version: number; consistent: boolean }> = [];
    const poller = async (p: number) => {
      // Like a gateway that already has the snapshot at v0.
      let etag = `"${v0}"`;
      let seen = v0;
      for (let i = 0; writing; i++) {
        const replica = (i + p) % 2 ? urlA : urlB;
        const res = await call(replica, 'GET', '/rules/snapshot', undefined, { 'if-none-match': etag });
        expect([200, 304]).toContain(res.status);
        const version = Number(JSON.parse(res.etag!));
        expect(version).toBeGreaterThanOrEqual(seen);
        if (res.status === 200) {
          expect(res.body.version).toBe(version);
          observed.push({ version, consistent: sum(res.body.rules) - baseSum === version - v0 });
        }
        seen = version;
        etag = res.etag!;
      }
    };
    const pollers = [0, 1, 2].map(poller);
    await Promise.all(Array.from({ length: 6 }, (_, w) => writer(w)));
    writing = false;
    await Promise.all(pollers);

    expect(observed.length).toBeGreaterThan(0);
    expect(observed.filter((o) => !o.consistent)).toEqual([]);
    const final = await freshSnapshot(urlB);
    expect(final.version).toBe(v0 + committed);
    expect(sum(final.rules) - baseSum).toBe(committed);
  });

  it('a replica with a stale cache never answers a tag newer than its cache with an older snapshot', async () => {
    const before = await call(urlB, 'GET', '/rules/snapshot');
    // B now caches this version for 5 s; A takes a write.
    await call(urlA, 'POST', '/rules', ruleInput());
    const fromA = await call(urlA, 'GET', '/rules/snapshot');
    expect(fromA.body.version).toBe(before.body.version + 1);
    const fromB = await call(urlB, 'GET', '/rules/snapshot', undefined, { 'if-none-match': fromA.etag! });
    expect(fromB.status).toBe(304);
    expect(fromB.etag).toBe(fromA.etag);
  });

  it('the token never reaches the history', async () => {
    const rows = await db.query('SELECT DISTINCT actor, rule::text AS rule FROM rule_history');
    expect(rows.every((r) => r.actor === 'admin')).toBe(true);
    expect(JSON.stringify(rows)).not.toContain(ADMIN_TOKEN);
  });
});
