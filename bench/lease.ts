// Lease mode beside a bare @fastify/http-proxy in front of the same upstream, in one run. Same setup as
// gateway.ts: every server (upstream, bare proxy, rules API, gateways, a private redis-server) pinned
// to CPU 1, this load generator to CPU 0.
//
// Part 1, G-allow: closed loop (autocannon, pipelining 1, BENCH_CONNECTIONS connections), BENCH_ROUNDS
// interleaved rounds of BENCH_SECONDS: bare, a lease-mode rule that admits everything (one global key),
// and the same rule in exact mode. Redis calls (EVALSHA, from the private Redis's INFO commandstats,
// lease returns included) per admitted request.
//
// Part 2, accuracy: for 1, 2, 4 and 8 gateways (BENCH_GATEWAYS) on the one Redis, paced load on ONE key
// (BENCH_PACED_RPS in total, spread evenly over the gateways, above the limit) for BENCH_ACCURACY_SECONDS
// per mode: admitted / (capacity + rate·T), T from the first request sent to the last answer, and Redis
// calls per request. Each run uses a key of its own (a fresh, full bucket).
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_GATEWAYS ("1,2,4,8"),
// BENCH_ACCURACY_SECONDS (10), BENCH_PACED_RPS (400), BENCH_LEASE_MS (100).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
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
const GATEWAY_COUNTS = (process.env.BENCH_GATEWAYS ?? '1,2,4,8').split(',').map(Number);
const ACCURACY_SECONDS = Number(process.env.BENCH_ACCURACY_SECONDS ?? 10);
const PACED_RPS = Number(process.env.BENCH_PACED_RPS ?? 400);
const LEASE_MS = process.env.BENCH_LEASE_MS ?? '100';
/** the accuracy rules' bucket: 100 tokens, 200 per second (the paced load offers twice that) */
const CAPACITY = 100;
const RATE_PER_S = 200;

for (const rule of [
  // one global key, never short: every request admitted
  { name: 'allow-lease', mode: 'lease', capacity: 1e9 },
  { name: 'allow-exact', mode: 'exact', capacity: 1e9 },
  // one key per run (header x-key), 100 tokens, 200/s
  { name: 'paced-lease', mode: 'lease', capacity: CAPACITY, client: 'header' },
  { name: 'paced-exact', mode: 'exact', capacity: CAPACITY, client: 'header' },
]) {
  const body = {
    name: rule.name,
    match: { path: `/${rule.name}/**` },
    client: rule.client === 'header' ? { by: 'header', name: 'x-key' } : { by: 'global' },
    limit:
      rule.capacity === CAPACITY
        ? { capacity: CAPACITY, refill: RATE_PER_S, period: '1s' }
        : { capacity: rule.capacity, refill: rule.capacity, period: '1s' },
    maxDebt: 0,
    mode: rule.mode,
  };
  const res = await fetch(`${rulesUrl}/rules`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`creating ${rule.name}: ${res.status} ${await res.text()}`);
}

const gatewayPorts: number[] = [];
const adminPorts: number[] = [];
const gateways = [];
for (let i = 0; i < Math.max(...GATEWAY_COUNTS); i++) {
  const port = await freePort();
  const adminPort = await freePort();
  gateways.push(
    await startPinned(
      `gateway ${i + 1}`,
      SERVER_CPU,
      [...gatewayNode, 'apps/gateway/dist/server.js'],
      {
        ...quiet,
        PORT: String(port),
        HOST: '127.0.0.1',
        ADMIN_PORT: String(adminPort),
        UPSTREAMS: `/=${upstreamUrl}`,
        RULES_API_URL: rulesUrl,
        RULES_API_TOKEN: adminToken,
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        LEASE_MS,
        // a slow answer on the busy core must not hand decisions to the STORE_FAILURE policy (an
        // in-process bucket per gateway): that is not what this bench measures; fallbacks are printed
        STORE_TIMEOUT_MS: '1000',
      },
      () => httpOk(`http://127.0.0.1:${adminPort}/readyz`),
    ),
  );
  gatewayPorts.push(port);
  adminPorts.push(adminPort);
}

async function evalshaCalls(): Promise<number> {
  const commands = await redisClient.info('commandstats');
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(commands)?.[1] ?? 0);
}

interface RoundResult {
  rps: number;
  responses: number;
  status2xx: number;
  errors: number;
  evalsha: number;
  /** CPU µs per response on CPU 1: the proxy, and proxy + upstream + Redis */
  proxyCpuUs: number;
  serverCpuUs: number;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

async function cannon(url: string, seconds: number, proxyPid: number | undefined): Promise<RoundResult> {
  const pids = [proxyPid, upstream.child.pid, redis.child.pid];
  const cpuBefore = pids.map(cpuMs);
  const before = await evalshaCalls();
  const r = await autocannon({ url, connections: CONNECTIONS, pipelining: 1, duration: seconds });
  const evalsha = (await evalshaCalls()) - before;
  return {
    rps: r.requests.average,
    responses: r.requests.total,
    status2xx: r['2xx'],
    errors: r.errors + r.timeouts,
    evalsha,
    proxyCpuUs: ((cpuMs(proxyPid) - cpuBefore[0]!) * 1000) / r.requests.total,
    serverCpuUs: (sum(pids.map((pid, i) => cpuMs(pid) - cpuBefore[i]!)) * 1000) / r.requests.total,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const fmt = (n: number, d = 0) => n.toFixed(d);

// Part 1: G-allow beside the bare proxy
const bareUrl = `http://127.0.0.1:${barePort}/ok/item`;
const leaseUrl = `http://127.0.0.1:${gatewayPorts[0]}/allow-lease/item`;
const exactUrl = `http://127.0.0.1:${gatewayPorts[0]}/allow-exact/item`;
// no rule matches: the gateway's own cost without any limiter, the most lease mode can approach
const freeUrl = `http://127.0.0.1:${gatewayPorts[0]}/free/item`;
const gatewayPid = gateways[0]!.child.pid;
await cannon(bareUrl, 2, bare.child.pid);
await cannon(leaseUrl, 2, gatewayPid);
await cannon(exactUrl, 2, gatewayPid);
await cannon(freeUrl, 2, gatewayPid);
const scenarios = {
  bare: [] as RoundResult[],
  free: [] as RoundResult[],
  lease: [] as RoundResult[],
  exact: [] as RoundResult[],
};
for (let i = 0; i < ROUNDS; i++) {
  scenarios.bare.push(await cannon(bareUrl, SECONDS, bare.child.pid));
  scenarios.lease.push(await cannon(leaseUrl, SECONDS, gatewayPid));
  scenarios.exact.push(await cannon(exactUrl, SECONDS, gatewayPid));
  scenarios.free.push(await cannon(freeUrl, SECONDS, gatewayPid));
}

// Part 2: accuracy under paced load on one key
const agent = new Agent({ keepAlive: true, maxSockets: 64 });
function send(port: number, path: string, key: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent, headers: { 'x-key': key } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

/** Decisions the STORE_FAILURE policy took instead of Redis, summed over the first `count` gateways. */
async function fallbacks(count: number): Promise<number> {
  let total = 0;
  for (const port of adminPorts.slice(0, count)) {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const match of text.matchAll(/^sluice_store_fallbacks_total\{[^}]*\} (\S+)$/gm))
      total += Number(match[1]);
  }
  return total;
}

interface AccuracyResult {
  requests: number;
  admitted: number;
  other: number;
  bound: number;
  callsPerRequest: number;
  fallbacks: number;
}

let run = 0;
async function paced(mode: 'lease' | 'exact', count: number): Promise<AccuracyResult> {
  const key = `run-${++run}`;
  const ports = gatewayPorts.slice(0, count);
  const tickMs = 5;
  const perTick = (PACED_RPS * tickMs) / 1000;
  const before = await evalshaCalls();
  const fallbacksBefore = await fallbacks(count);
  const pending: Promise<number>[] = [];
  const startedAt = performance.now();
  let sent = 0;
  while (performance.now() - startedAt < ACCURACY_SECONDS * 1000) {
    // paced: as many sends as the schedule says by now, round-robin over the gateways
    const due = Math.floor(((performance.now() - startedAt) / tickMs) * perTick);
    for (; sent < due; sent++) pending.push(send(ports[sent % count]!, `/paced-${mode}/item`, key));
    await new Promise((resolve) => setTimeout(resolve, tickMs));
  }
  const statuses = await Promise.all(pending);
  const elapsedS = (performance.now() - startedAt) / 1000;
  // leases end within LEASE_MS: wait for their returns before counting calls
  await new Promise((resolve) => setTimeout(resolve, 2 * Number(LEASE_MS)));
  const calls = (await evalshaCalls()) - before;
  const admitted = statuses.filter((s) => s === 200).length;
  return {
    requests: statuses.length,
    admitted,
    other: statuses.filter((s) => s !== 200 && s !== 429).length,
    bound: CAPACITY + RATE_PER_S * elapsedS,
    callsPerRequest: calls / statuses.length,
    fallbacks: (await fallbacks(count)) - fallbacksBefore,
  };
}

const accuracy: { count: number; exact: AccuracyResult; lease: AccuracyResult }[] = [];
for (const count of GATEWAY_COUNTS) {
  const exact = await paced('exact', count);
  const lease = await paced('lease', count);
  accuracy.push({ count, exact, lease });
}

const cpuCell = (runs: RoundResult[]) => {
  const server = median(runs.map((r) => r.serverCpuUs));
  const proxy = median(runs.map((r) => r.proxyCpuUs));
  return `${fmt(server)} (proxy ${fmt(proxy)})`;
};
const bareRps = median(scenarios.bare.map((r) => r.rps));
console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s, ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; LEASE_MS ${LEASE_MS}; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| scenario | req/s (median) | vs bare | target | Redis calls per admitted request | target | CPU µs per request on CPU 1 (proxy + upstream + Redis) | non-2xx or failed |',
);
console.log('| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |');
console.log(`| bare @fastify/http-proxy | ${fmt(bareRps)} | 1.00 | | | | ${cpuCell(scenarios.bare)} | |`);
for (const [label, key, target, callsTarget] of [
  ['gateway, no rule matches (no limiter at all)', 'free', '', ''],
  ['gateway, lease mode, one global key', 'lease', '≥ 0.97', '≤ 0.05'],
  ['gateway, exact mode, same rule', 'exact', '', ''],
] as const) {
  const runs = scenarios[key];
  const rps = median(runs.map((r) => r.rps));
  const calls = sum(runs.map((r) => r.evalsha)) / sum(runs.map((r) => r.status2xx));
  const other = sum(runs.map((r) => r.responses - r.status2xx + r.errors));
  console.log(
    `| ${label} | ${fmt(rps)} | ${fmt(rps / bareRps, 2)} | ${target} | ${fmt(calls, 4)} | ${callsTarget} | ${cpuCell(runs)} | ${other} |`,
  );
}
console.log(
  `\nper-round req/s: ${(['bare', 'free', 'lease', 'exact'] as const)
    .map((k) => `${k} ${scenarios[k].map((r) => fmt(r.rps)).join(' / ')}`)
    .join('; ')}`,
);
console.log(
  `\nAccuracy: one key, bucket of ${CAPACITY} tokens refilled at ${RATE_PER_S}/s, ${PACED_RPS} req/s paced over the gateways for ${ACCURACY_SECONDS} s per run; admitted / (capacity + rate·T); targets: exact within [0.99, 1.005], lease never above 1.0 and ≥ 0.95\n`,
);
console.log(
  '| gateways | exact: admitted / bound | exact: Redis calls per request | lease: admitted / bound | lease: Redis calls per request | requests per run | non-2xx/429 | policy fallbacks (exact / lease) |',
);
console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const { count, exact, lease } of accuracy) {
  console.log(
    `| ${count} | ${fmt(exact.admitted / exact.bound, 3)} (${exact.admitted} / ${fmt(exact.bound, 1)}) | ${fmt(exact.callsPerRequest, 3)} | ${fmt(lease.admitted / lease.bound, 3)} (${lease.admitted} / ${fmt(lease.bound, 1)}) | ${fmt(lease.callsPerRequest, 3)} | ${exact.requests} / ${lease.requests} | ${exact.other + lease.other} | ${exact.fallbacks} / ${lease.fallbacks} |`,
  );
}
if (loadAtStart > 0.5)
  console.log('\nnote: the machine was not idle at start; rerun when `uptime` shows a low load');

agent.destroy();
redisClient.disconnect();
for (const p of [...gateways, rulesApi, bare, upstream, redis]) await p.stop();
rmSync(dataDir, { recursive: true, force: true });
