// GET /rules/snapshot with 10,000 rules on Postgres: a full fetch, and the 304 every unchanged
// gateway poll gets (with the in-memory version cache, and with it off: one tiny query per poll).
// The rules API runs as its own process pinned to CPU 0; autocannon (10 connections, pipelining 1)
// runs here. Run alone: node --conditions=sluice-source --import tsx bench/snapshot.ts

import { createTestDatabase } from '@sluice/test-support';
import autocannon from 'autocannon';
import { openDatabase } from '../apps/rules-api/src/db/client.js';
import { migrateDatabase } from '../apps/rules-api/src/db/migrate.js';
import { RulesRepository } from '../apps/rules-api/src/rules/repository.js';
import { freePort, httpOk, type Started, startPinned } from './_lib/processes.js';

const RULES = 10_000;
const WARMUP_SEC = 1;
const DURATION_SEC = 5;
const CONNECTIONS = 10;
const TOKEN = 'bench-admin-token';
const auth = { authorization: `Bearer ${TOKEN}` };

interface Row {
  scenario: string;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  mbPerSec: number;
  statuses: string;
}

async function seed(url: string): Promise<void> {
  const database = await openDatabase({ databaseUrl: url, dataDir: '', timeoutMs: 10_000 });
  try {
    await migrateDatabase(database);
    const methods = [['GET'], ['GET', 'POST'], [], ['DELETE']] as const;
    await new RulesRepository(database).createMany(
      Array.from({ length: RULES }, (_, i) => ({
        name: `bench-rule-${String(i).padStart(5, '0')}`,
        description: i % 3 === 0 ? `rule number ${i} for the snapshot benchmark` : undefined,
        match: {
          path: `/api/v1/tenant-${i % 100}/resource-${i}/**`,
          methods: [...methods[i % methods.length]!],
          ...(i % 5 === 0 ? { host: `svc-${i % 7}.example.com` } : {}),
        },
        client: i % 2 ? { by: 'header' as const, name: 'x-api-key' } : { by: 'ip' as const },
        limit: { capacity: 100 + (i % 50), refill: 10, period: i % 2 ? '1s' : 60_000 },
        cost: 1,
        maxDebt: 100 + (i % 50),
        enabled: i % 10 !== 0,
        shadow: i % 17 === 0,
        priority: i % 4,
      })),
      'bench',
    );
  } finally {
    await database.close();
  }
}

async function startApi(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<{ base: string; api: Started }> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const api = await startPinned(
    'rules-api',
    '0',
    [process.execPath, '--conditions=sluice-source', '--import', 'tsx', 'apps/rules-api/src/server.ts'],
    // warn: per-request info logs would measure pino, not the snapshot path
    {
      DATABASE_URL: databaseUrl,
      ADMIN_TOKEN: TOKEN,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ...env,
    },
    () => httpOk(`${base}/readyz`),
  );
  return { base, api };
}

async function measure(scenario: string, url: string, headers: Record<string, string>): Promise<Row> {
  const options = { url, headers, connections: CONNECTIONS, pipelining: 1 };
  await autocannon({ ...options, duration: WARMUP_SEC });
  const r = await autocannon({ ...options, duration: DURATION_SEC });
  const statuses = Object.entries(r.statusCodeStats ?? {})
    .map(([code, s]) => `${code}×${s.count ?? 0}`)
    .join(' ');
  return {
    scenario,
    rps: r.requests.average,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    mbPerSec: r.throughput.average / 1e6,
    statuses: r.errors + r.timeouts > 0 ? `${statuses} errors×${r.errors + r.timeouts}` : statuses,
  };
}

const db = await createTestDatabase('sluice_bench');
const started: Started[] = [];
try {
  const seedStart = performance.now();
  await seed(db.url);
  console.log(`seeded ${RULES} rules in ${Math.round(performance.now() - seedStart)} ms`);

  const cached = await startApi(db.url);
  started.push(cached.api);
  const first = await fetch(`${cached.base}/rules/snapshot`, { headers: auth });
  const etag = first.headers.get('etag')!;
  const bytes = (await first.arrayBuffer()).byteLength;
  const zipped = await fetch(`${cached.base}/rules/snapshot`, {
    headers: { ...auth, 'accept-encoding': 'gzip' },
  });
  const gzipBytes = Number(zipped.headers.get('content-length'));
  await zipped.arrayBuffer();
  console.log(
    `snapshot: ${RULES} rules, ${(bytes / 1e6).toFixed(2)} MB (gzip ${(gzipBytes / 1e6).toFixed(2)} MB), ETag ${etag}\n`,
  );

  const uncached = await startApi(db.url, { SNAPSHOT_CACHE_MS: '0' });
  started.push(uncached.api);

  const rows = [
    await measure('full fetch (200)', `${cached.base}/rules/snapshot`, auth),
    await measure('full fetch (200), Accept-Encoding: gzip', `${cached.base}/rules/snapshot`, {
      ...auth,
      'accept-encoding': 'gzip',
    }),
    await measure('unchanged poll (304), version cached', `${cached.base}/rules/snapshot`, {
      ...auth,
      'if-none-match': etag,
    }),
    await measure('unchanged poll (304), SNAPSHOT_CACHE_MS=0', `${uncached.base}/rules/snapshot`, {
      ...auth,
      'if-none-match': etag,
    }),
  ];

  console.log(
    `${CONNECTIONS} connections, pipelining 1, ${DURATION_SEC} s after ${WARMUP_SEC} s warm-up; API pinned to CPU 0\n`,
  );
  console.log('| scenario | req/s | p50 ms | p99 ms | MB/s | statuses |');
  console.log('| --- | ---: | ---: | ---: | ---: | --- |');
  for (const r of rows) {
    console.log(
      `| ${r.scenario} | ${Math.round(r.rps)} | ${r.p50Ms} | ${r.p99Ms} | ${r.mbPerSec.toFixed(1)} | ${r.statuses} |`,
    );
  }
} finally {
  for (const api of started) await api.stop();
  await db.drop();
}
