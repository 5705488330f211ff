// Gateway throughput and latency beside a bare @fastify/http-proxy in front of the same upstream.
//
// Setup: every server (upstream, bare proxy, rules API, gateway, a private redis-server) is pinned to
// CPU 1, this load generator to CPU 0, so neither side steals the other's core on a 2-core machine.
// Redis is a server too: it stays on CPU 1, so the gateway pays for its store on the same core the bare
// proxy has to itself (the per-process CPU column shows that share).
//
// Closed loop: autocannon, pipelining 1, BENCH_CONNECTIONS connections, one warm-up, BENCH_ROUNDS
// interleaved rounds of BENCH_SECONDS (bare; a single-limit rule, a stacked rule of three limits and a
// sliding-window rule, every request admitted; a denied flood), medians reported. EVALSHA calls are read
// from Redis `INFO commandstats` around each round and divided by the responses of that round.
// The gateway batches its script calls (the default: the decisions of one event-loop turn leave as one
// EVALSHA), so EVALSHA per request is below 1 under concurrent load, each decision still exact.
// Open loop: an evenly paced client at half the bare proxy's median rate, interleaved, p99 from the
// scheduled send time (see _lib/open-loop.ts for how it keeps itself out of the measurement); the
// median of the rounds' p99 is compared.
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_OPEN_ROUNDS (open-loop
// rounds, max(BENCH_ROUNDS, 5)), BENCH_CPU_PROF=<dir> (write V8 CPU profiles of the gateway and the
// bare proxy there; slows both), BENCH_SERVER_NODE_FLAGS (extra node flags for every Node server,
// the same for all, e.g. `--single-threaded-gc`; none by default).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import Redis from 'ioredis';
import { cpuMs } from './_lib/cpu-time.js';
import { type OpenLoopResult, openLoop } from './_lib/open-loop.js';
import { freePort, httpOk, startPinned } from './_lib/processes.js';

const SERVER_CPU = '1';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
// p99 over 5 s is decided by a few dozen requests, so the open loop gets more rounds than the closed one
const OPEN_ROUNDS = Number(process.env.BENCH_OPEN_ROUNDS ?? Math.max(ROUNDS, 5));
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
  // every benchmark request from 127.0.0.1 lands in this one bucket, which never runs dry
  { name: 'bench-admit', match: { path: '/ok/**' }, limit: { capacity: 1e9, refill: 1e9, period: '1s' } },
  // rule format v2, three limits that all admit: the stack a real deployment writes (a burst and a
  // daily quota per API key, a cap for everyone), decided by one EVALSHA per request
  {
    name: 'bench-stacked',
    match: { path: '/stacked/**' },
    limits: [
      {
        name: 'burst',
        client: { by: 'header', name: 'x-api-key' },
        capacity: 1e9,
        refill: 1e9,
        period: '1s',
      },
      {
        name: 'daily',
        client: { by: 'header', name: 'x-api-key' },
        algorithm: 'sliding-window',
        max: 1e12,
        window: '1d',
      },
      { name: 'everyone', client: { by: 'global' }, capacity: 1e9, refill: 1e9, period: '1s' },
    ],
  },
  // one sliding window per client IP that never fills
  {
    name: 'bench-window',
    match: { path: '/window/**' },
    limits: [{ name: 'hourly', algorithm: 'sliding-window', max: 1e12, window: '1h' }],
  },
  // one token a day: after the first request, a single blocked client
  { name: 'bench-deny', match: { path: '/denied/**' }, limit: { capacity: 1, refill: 1, period: '1d' } },
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
const admitUrl = `http://127.0.0.1:${gatewayPort}/ok/item`;
const stackedUrl = `http://127.0.0.1:${gatewayPort}/stacked/item`;
const windowUrl = `http://127.0.0.1:${gatewayPort}/window/item`;
const denyUrl = `http://127.0.0.1:${gatewayPort}/denied/item`;
/** the stacked rule's per-key limits are keyed by this header: one API key for the whole run */
const stackedHeaders = { 'x-api-key': 'bench-key' };

async function redisStats(): Promise<{ evalsha: number; reads: number }> {
  const [commands, stats] = await Promise.all([redisClient.info('commandstats'), redisClient.info('stats')]);
  return {
    evalsha: Number(/cmdstat_evalsha:calls=(\d+)/.exec(commands)?.[1] ?? 0),
    reads: Number(/total_reads_processed:(\d+)/.exec(stats)?.[1] ?? 0),
  };
}

/** Decisions the gateway's STORE_FAILURE policy took instead of Redis (slow or failed store calls). */
async function gatewayFallbacks(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('sluice_store_fallbacks_total{'))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

interface RoundResult {
  rps: number;
  responses: number;
  status2xx: number;
  status429: number;
  errors: number;
  /** EVALSHA calls per response */
  evalshaPerResponse: number;
  /** gateway decisions taken by the STORE_FAILURE fallback, not Redis (0 for the bare proxy) */
  fallbacks: number;
  /** Redis socket reads per EVALSHA (below 1: several calls arrived in one read) */
  redisReadsPerEvalsha: number;
  /** CPU µs per response, by server process */
  cpuUs: { proxy: number; upstream: number; redis: number };
}

async function cannon(
  url: string,
  seconds: number,
  proxyPid: number | undefined,
  headers: Record<string, string> = {},
): Promise<RoundResult> {
  // CPU time of the processes on the server CPU, charged to the scenario that ran
  const pids = { proxy: proxyPid, upstream: upstream.child.pid, redis: redis.child.pid };
  const cpuBefore = { proxy: cpuMs(pids.proxy), upstream: cpuMs(pids.upstream), redis: cpuMs(pids.redis) };
  const viaGateway = proxyPid === gateway.child.pid;
  const fallbacksBefore = viaGateway ? await gatewayFallbacks() : 0;
  const redisBefore = await redisStats();
  const r = await autocannon({ url, headers, connections: CONNECTIONS, pipelining: 1, duration: seconds });
  const redisAfter = await redisStats();
  const fallbacks = viaGateway ? (await gatewayFallbacks()) - fallbacksBefore : 0;
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
    fallbacks,
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

// warm-up (JIT tiers, connection pools, the Redis script cache, the denial cache); with 1 s the
// first measured round still ran slow
await cannon(bareUrl, 3, bare.child.pid);
await cannon(admitUrl, 3, gateway.child.pid);
await cannon(stackedUrl, 3, gateway.child.pid, stackedHeaders);
await cannon(windowUrl, 3, gateway.child.pid);
await cannon(denyUrl, 2, gateway.child.pid);

const scenarios = {
  bare: [] as RoundResult[],
  admit: [] as RoundResult[],
  stacked: [] as RoundResult[],
  window: [] as RoundResult[],
  deny: [] as RoundResult[],
};
for (let i = 0; i < ROUNDS; i++) {
  scenarios.bare.push(await cannon(bareUrl, SECONDS, bare.child.pid));
  scenarios.admit.push(await cannon(admitUrl, SECONDS, gateway.child.pid));
  scenarios.stacked.push(await cannon(stackedUrl, SECONDS, gateway.child.pid, stackedHeaders));
  scenarios.window.push(await cannon(windowUrl, SECONDS, gateway.child.pid));
  scenarios.deny.push(await cannon(denyUrl, SECONDS, gateway.child.pid));
}
const warnings: string[] = [];
const admittedIn = (name: 'admit' | 'stacked' | 'window') => {
  const other = sum(scenarios[name].map((r) => r.responses - r.status2xx + r.errors));
  if (other > 0) warnings.push(`${name} rounds: ${other} responses were not 2xx or failed`);
  return sum(scenarios[name].map((r) => r.status2xx));
};
for (const name of ['admit', 'stacked', 'window', 'deny'] as const) {
  const fallbacks = sum(scenarios[name].map((r) => r.fallbacks));
  // a decision the fallback took costs no EVALSHA: the EVALSHA ratio of that scenario is then below 1
  if (fallbacks > 0)
    warnings.push(
      `${name} rounds: ${fallbacks} decisions were taken by STORE_FAILURE=local, not Redis (Redis slower than STORE_TIMEOUT_MS)`,
    );
}
const admitted = admittedIn('admit');
const stackedAdmitted = admittedIn('stacked');
const windowAdmitted = admittedIn('window');
const deniedResponses = sum(scenarios.deny.map((r) => r.status429));
const denyOther = sum(scenarios.deny.map((r) => r.responses - r.status429 + r.errors));
if (deniedResponses === 0) warnings.push('deny rounds saw no 429');
if (denyOther > 0) warnings.push(`deny rounds: ${denyOther} responses were not 429 or failed`);

// Latency at half the bare proxy's max rate, open loop, interleaved.
const bareRps = median(scenarios.bare.map((r) => r.rps));
const rate = Math.round(bareRps / 2);
const openBare: OpenLoopResult[] = [];
const openAdmit: OpenLoopResult[] = [];
for (let i = 0; i < OPEN_ROUNDS; i++) {
  openBare.push(await openLoop(bareUrl, rate, SECONDS * 1000));
  openAdmit.push(await openLoop(admitUrl, rate, SECONDS * 1000));
}
for (const [name, runs] of [
  ['bare', openBare],
  ['gateway', openAdmit],
] as const) {
  const bound = runs.filter((r) => r.clientBound).length;
  if (bound > 0) warnings.push(`open loop ${name}: the client lagged or missed its rate in ${bound} run(s)`);
}

// ---- report ----
const admitRps = median(scenarios.admit.map((r) => r.rps));
const stackedRps = median(scenarios.stacked.map((r) => r.rps));
const windowRps = median(scenarios.window.map((r) => r.rps));
const denyRps = median(scenarios.deny.map((r) => r.rps));
const fmt = (n: number, d = 0) => n.toFixed(d);
const cpuCell = (runs: RoundResult[]) => {
  const proxy = median(runs.map((r) => r.cpuUs.proxy));
  const up = median(runs.map((r) => r.cpuUs.upstream));
  const red = median(runs.map((r) => r.cpuUs.redis));
  return `${fmt(proxy + up + red)} = ${fmt(proxy)} + ${fmt(up)} + ${fmt(red)}`;
};
const evalshaPer = (runs: RoundResult[]) =>
  sum(runs.map((r) => r.evalshaPerResponse * r.responses)) / sum(runs.map((r) => r.responses));
const p = (runs: OpenLoopResult[], key: 'p50Ms' | 'p99Ms' | 'sendLagP99Ms' | 'achievedRps', d = 2) =>
  fmt(median(runs.map((r) => r[key])), d);

console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s (open loop: ${OPEN_ROUNDS}), ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| scenario | req/s (median) | vs bare | target | CPU µs/req on CPU 1 = proxy + upstream + redis |',
);
console.log('| --- | ---: | ---: | --- | ---: |');
console.log(`| bare @fastify/http-proxy | ${fmt(bareRps)} | 1.00 | | ${cpuCell(scenarios.bare)} |`);
console.log(
  `| gateway, every request admitted (Redis, exact, batched: the default) | ${fmt(admitRps)} | ${fmt(admitRps / bareRps, 2)} | ≥ 0.90 | ${cpuCell(scenarios.admit)} |`,
);
console.log(
  `| gateway, stacked rule: 3 limits (burst + daily per key, global), all admit (batched) | ${fmt(stackedRps)} | ${fmt(stackedRps / bareRps, 2)} | ≥ 0.75 | ${cpuCell(scenarios.stacked)} |`,
);
console.log(
  `| gateway, sliding-window rule, every request admitted | ${fmt(windowRps)} | ${fmt(windowRps / bareRps, 2)} | | ${cpuCell(scenarios.window)} |`,
);
console.log(
  `| gateway, denied flood (one blocked client) | ${fmt(denyRps)} | ${fmt(denyRps / bareRps, 2)} | ≥ 2.00 | ${cpuCell(scenarios.deny)} |`,
);
console.log(
  `\nper-round req/s: ${(['bare', 'admit', 'stacked', 'window', 'deny'] as const)
    .map((k) => `${k} ${scenarios[k].map((r) => fmt(r.rps)).join(' / ')}`)
    .join('; ')}\n`,
);
console.log('| measure | value | target |');
console.log('| --- | ---: | --- |');
console.log(
  `| EVALSHA per admitted request (${admitted} admitted) | ${fmt(evalshaPer(scenarios.admit), 3)} | < 1 (batched) |`,
);
console.log(
  `| EVALSHA per admitted request, stacked rule (${stackedAdmitted} admitted) | ${fmt(evalshaPer(scenarios.stacked), 3)} | < 1 (batched) |`,
);
console.log(
  `| EVALSHA per admitted request, sliding-window rule (${windowAdmitted} admitted) | ${fmt(evalshaPer(scenarios.window), 3)} | < 1 (batched) |`,
);
console.log(
  `| EVALSHA per denied request (flood, ${deniedResponses} denied) | ${fmt(evalshaPer(scenarios.deny), 4)} | 0 (denial cache) |`,
);
console.log(
  `| Redis socket reads per EVALSHA (admit) | ${fmt(median(scenarios.admit.map((r) => r.redisReadsPerEvalsha)), 2)} | |`,
);
console.log(
  `| open-loop at ${rate} req/s, bare: achieved req/s, p50, p99 (client send lag p99) | ${p(openBare, 'achievedRps', 0)}, ${p(openBare, 'p50Ms')} ms, ${p(openBare, 'p99Ms')} ms (${p(openBare, 'sendLagP99Ms')} ms) | |`,
);
const p99Over = median(openAdmit.map((r) => r.p99Ms)) - median(openBare.map((r) => r.p99Ms));
console.log(
  `| open-loop at ${rate} req/s, gateway: achieved req/s, p50, p99 (client send lag p99) | ${p(openAdmit, 'achievedRps', 0)}, ${p(openAdmit, 'p50Ms')} ms, ${p(openAdmit, 'p99Ms')} ms (${p(openAdmit, 'sendLagP99Ms')} ms) | p99 ≤ bare + 1 ms, median of ${OPEN_ROUNDS} rounds (${p99Over >= 0 ? '+' : ''}${fmt(p99Over, 2)} ms) |`,
);
console.log(
  `\nopen-loop p99 per round (ms): bare ${openBare.map((r) => fmt(r.p99Ms, 2)).join(' / ')}; gateway ${openAdmit.map((r) => fmt(r.p99Ms, 2)).join(' / ')}`,
);
for (const w of warnings) console.log(`warning: ${w}`);
if (loadAtStart > 0.5)
  console.log('note: the machine was not idle at start; rerun when `uptime` shows a low load');

redisClient.disconnect();
for (const p of [gateway, rulesApi, bare, upstream, redis]) await p.stop();
rmSync(dataDir, { recursive: true, force: true });
