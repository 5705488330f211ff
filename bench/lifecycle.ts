// The lifecycle's cost (concurrency slots, charging at the response) beside a bare @fastify/http-proxy
// in front of the same upstream, in one run. Same setup as gateway.ts (servers and a private Redis on
// CPU 1, load on CPU 0), closed loop only: BENCH_ROUNDS interleaved rounds of BENCH_SECONDS (bare,
// concurrency, charged), medians. EVALSHA per response from Redis `INFO commandstats`: a concurrency
// rule takes 2 (take the slot, give it back), a charged rule 2 (admission, settlement).
//
// Setup of gateway.ts follows.
//
// Setup: every server (upstream, bare proxy, rules API, gateway, a private redis-server) is pinned to
// CPU 1, this load generator to CPU 0, so neither side steals the other's core on a 2-core machine.
// Redis is a server too: it stays on CPU 1, so the gateway pays for its store on the same core the bare
// proxy has to itself (the per-process CPU column shows that share).
//
// Closed loop: autocannon, pipelining 1, BENCH_CONNECTIONS connections, one warm-up, BENCH_ROUNDS
// interleaved rounds of BENCH_SECONDS (bare, admit, deny), medians reported. EVALSHA calls are read
// from Redis `INFO commandstats` around each round and divided by the responses of that round.
// Open loop: an evenly paced client at half the bare proxy's median rate, interleaved, p99 from the
// scheduled send time (see _lib/open-loop.ts for how it keeps itself out of the measurement); the
// median of the rounds' p99 is compared.
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_OPEN_ROUNDS (open-loop
// rounds, max(BENCH_ROUNDS, 7)), BENCH_CPU_PROF=<dir> (write V8 CPU profiles of the gateway and the
// bare proxy there; slows both), BENCH_SERVER_NODE_FLAGS (extra node flags for every Node server,
// the same for all, e.g. `--single-threaded-gc`; none by default).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import Redis from 'ioredis';
import { cpuMs } from './_lib/cpu-time.js';
import { freePort, httpOk, startPinned } from './_lib/processes.js';

const SERVER_CPU = '1';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
const PROFILE_DIR = process.env.BENCH_CPU_PROF;

// Pin ourselves (the load generator) to CPU 0 by re-executing under taskset once, with a young
// generation large enough that the client's own scavenges (about 1 ms each) are rare: they would
// otherwise add a millisecond to 1% of the open-loop requests, the very percentile measured.
if (!process.env.SLUICE_BENCH_PINNED) {
  const r = spawnSync(
    'taskset',
    ['-c', '0', process.execPath, '--max-semi-space-size=64', ...process.execArgv, ...process.argv.slice(1)],
    {
      stdio: 'inherit',
      env: { ...process.env, SLUICE_BENCH_PINNED: '1' },
    },
  );
  process.exit(r.status ?? 1);
}

const loadAtStart = loadavg()[0]!;
const serverFlags = (process.env.BENCH_SERVER_NODE_FLAGS ?? '').split(' ').filter(Boolean);
const tsx = [process.execPath, ...serverFlags, '--conditions=sluice-source', '--import', 'tsx'];
const profiledTsx = PROFILE_DIR
  ? [process.execPath, '--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`, ...tsx.slice(1)]
  : tsx;
// The gateway runs its built output, as in production (`pnpm bench` builds first): tsx-transpiled
// sources carry name-keeping helpers that cost per object and would skew the comparison.
const gatewayNode = [
  process.execPath,
  ...serverFlags,
  ...(PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []),
];
const quiet = { LOG_LEVEL: 'warn', NODE_ENV: 'production' };
const dataDir = mkdtempSync(join(tmpdir(), 'sluice-bench-'));
const adminToken = 'bench-admin-token';

const redisPort = await freePort();
const redis = await startPinned(
  'redis',
  SERVER_CPU,
  ['redis-server', '--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
  {},
  async () => {
    const c = new Redis({ port: redisPort, lazyConnect: true, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    try {
      await c.connect();
      return (await c.ping()) === 'PONG';
    } finally {
      c.disconnect();
    }
  },
);
const redisClient = new Redis({ port: redisPort });

const upstreamPort = await freePort();
const upstream = await startPinned(
  'upstream',
  SERVER_CPU,
  [...tsx, 'bench/_lib/upstream.ts'],
  { PORT: String(upstreamPort) },
  () => httpOk(`http://127.0.0.1:${upstreamPort}/`),
);
const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;

const barePort = await freePort();
const bare = await startPinned(
  'bare proxy',
  SERVER_CPU,
  [...profiledTsx, 'bench/_lib/bare-proxy.ts'],
  { PORT: String(barePort), UPSTREAM_URL: upstreamUrl },
  () => httpOk(`http://127.0.0.1:${barePort}/`),
);

const rulesPort = await freePort();
const rulesApi = await startPinned(
  'rules API',
  SERVER_CPU,
  [...tsx, 'apps/rules-api/src/server.ts'],
  { ...quiet, PORT: String(rulesPort), HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN: adminToken },
  () => httpOk(`http://127.0.0.1:${rulesPort}/readyz`),
);
const rulesUrl = `http://127.0.0.1:${rulesPort}`;
for (const rule of [
  // one client, far more slots than connections: every request takes a slot and gives it back
  {
    name: 'bench-slots',
    match: { path: '/slots/**' },
    limits: [{ name: 'inflight', algorithm: 'concurrency', max: 1000 }],
  },
  // admitted on 2, charged by upstream time (1 token per second, so 1): every request settles -1
  {
    name: 'bench-charged',
    match: { path: '/charged/**' },
    limits: [{ name: 'tokens', capacity: 1e9, refill: 1e9, period: '1s' }],
    cost: 2,
    charge: { from: 'duration', unitMs: 1000 },
  },
]) {
  const res = await fetch(`${rulesUrl}/rules`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(rule),
  });
  if (res.status !== 201) throw new Error(`creating ${rule.name}: ${res.status} ${await res.text()}`);
}

const gatewayPort = await freePort();
const adminPort = await freePort();
const gateway = await startPinned(
  'gateway',
  SERVER_CPU,
  [...gatewayNode, 'apps/gateway/dist/server.js'],
  {
    ...quiet,
    PORT: String(gatewayPort),
    HOST: '127.0.0.1',
    ADMIN_PORT: String(adminPort),
    UPSTREAMS: `/=${upstreamUrl}`,
    RULES_API_URL: rulesUrl,
    RULES_API_TOKEN: adminToken,
    REDIS_URL: `redis://127.0.0.1:${redisPort}`,
  },
  () => httpOk(`http://127.0.0.1:${adminPort}/readyz`),
);

const bareUrl = `http://127.0.0.1:${barePort}/ok/item`;
const slotsUrl = `http://127.0.0.1:${gatewayPort}/slots/item`;
const chargedUrl = `http://127.0.0.1:${gatewayPort}/charged/item`;

async function redisStats(): Promise<{ evalsha: number; reads: number }> {
  const [commands, stats] = await Promise.all([redisClient.info('commandstats'), redisClient.info('stats')]);
  return {
    evalsha: Number(/cmdstat_evalsha:calls=(\d+)/.exec(commands)?.[1] ?? 0),
    reads: Number(/total_reads_processed:(\d+)/.exec(stats)?.[1] ?? 0),
  };
}

interface RoundResult {
  rps: number;
  responses: number;
  status2xx: number;
  status429: number;
  errors: number;
  /** EVALSHA calls per response */
  evalshaPerResponse: number;
  /** Redis socket reads per EVALSHA (below 1: several calls arrived in one read) */
  redisReadsPerEvalsha: number;
  /** CPU µs per response, by server process */
  cpuUs: { proxy: number; upstream: number; redis: number };
}

async function cannon(url: string, seconds: number, proxyPid: number | undefined): Promise<RoundResult> {
  // CPU time of the processes on the server CPU, charged to the scenario that ran
  const pids = { proxy: proxyPid, upstream: upstream.child.pid, redis: redis.child.pid };
  const cpuBefore = { proxy: cpuMs(pids.proxy), upstream: cpuMs(pids.upstream), redis: cpuMs(pids.redis) };
  const redisBefore = await redisStats();
  const r = await autocannon({ url, connections: CONNECTIONS, pipelining: 1, duration: seconds });
  const redisAfter = await redisStats();
  const responses = r.requests.total;
  const perResponseUs = (pid: number | undefined, beforeMs: number) =>
    ((cpuMs(pid) - beforeMs) * 1000) / responses;
  const statuses = r.statusCodeStats as unknown as Record<string, { count: number } | undefined>;
  const status2xx = r['2xx'];
  const status429 = statuses['429']?.count ?? 0;
  const evalsha = redisAfter.evalsha - redisBefore.evalsha;
  return {
    rps: r.requests.average,
    responses,
    status2xx,
    status429,
    errors: r.errors + r.timeouts,
    evalshaPerResponse: evalsha / responses,
    redisReadsPerEvalsha: evalsha > 0 ? (redisAfter.reads - redisBefore.reads) / evalsha : 0,
    cpuUs: {
      proxy: perResponseUs(pids.proxy, cpuBefore.proxy),
      upstream: perResponseUs(pids.upstream, cpuBefore.upstream),
      redis: perResponseUs(pids.redis, cpuBefore.redis),
    },
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

await cannon(bareUrl, 2, bare.child.pid);
await cannon(slotsUrl, 2, gateway.child.pid);
await cannon(chargedUrl, 2, gateway.child.pid);

const scenarios = { bare: [] as RoundResult[], slots: [] as RoundResult[], charged: [] as RoundResult[] };
for (let i = 0; i < ROUNDS; i++) {
  scenarios.bare.push(await cannon(bareUrl, SECONDS, bare.child.pid));
  scenarios.slots.push(await cannon(slotsUrl, SECONDS, gateway.child.pid));
  scenarios.charged.push(await cannon(chargedUrl, SECONDS, gateway.child.pid));
}
const fmt = (n: number, d = 0) => n.toFixed(d);
const bareRps = median(scenarios.bare.map((r) => r.rps));
const evalshaPer = (runs: RoundResult[]) =>
  sum(runs.map((r) => r.evalshaPerResponse * r.responses)) / sum(runs.map((r) => r.responses));
console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s, ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log('| scenario | req/s (median) | vs bare | target | EVALSHA per response | non-2xx or failed |');
console.log('| --- | ---: | ---: | --- | ---: | ---: |');
console.log(`| bare @fastify/http-proxy | ${fmt(bareRps)} | 1.00 | | | |`);
for (const [label, key] of [
  ['gateway, concurrency rule (take + give back)', 'slots'],
  ['gateway, charged rule (admit + settle)', 'charged'],
] as const) {
  const runs = scenarios[key];
  const rps = median(runs.map((r) => r.rps));
  const other = sum(runs.map((r) => r.responses - r.status2xx + r.errors));
  console.log(
    `| ${label} | ${fmt(rps)} | ${fmt(rps / bareRps, 2)} | ≥ 0.70 | ${fmt(evalshaPer(runs), 3)} | ${other} |`,
  );
}
console.log(
  `\nper-round req/s: ${(['bare', 'slots', 'charged'] as const)
    .map((k) => `${k} ${scenarios[k].map((r) => fmt(r.rps)).join(' / ')}`)
    .join('; ')}`,
);
if (loadAtStart > 0.5)
  console.log('note: the machine was not idle at start; rerun when `uptime` shows a low load');

redisClient.disconnect();
for (const p of [gateway, rulesApi, bare, upstream, redis]) await p.stop();
rmSync(dataDir, { recursive: true, force: true });
