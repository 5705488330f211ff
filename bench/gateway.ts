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
import { loadavg } from 'node:os';
import { closedLoopRound, closedLoopSettings, type RoundResult } from './_lib/closed-loop.js';
import { type OpenLoopResult, openLoop } from './_lib/open-loop.js';
import { createRules, nodeCommandsFromEnv, pinSelf, SERVER_CPU, Stack } from './_lib/stack.js';

const { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS } = closedLoopSettings();
// p99 over 5 s is decided by a few dozen requests, so the open loop gets more rounds than the closed one
const OPEN_ROUNDS = Number(process.env.BENCH_OPEN_ROUNDS ?? Math.max(ROUNDS, 5));

pinSelf();

const loadAtStart = loadavg()[0]!;
const stack = new Stack(nodeCommandsFromEnv());
const { redis, upstream, bare, rulesApi } = await stack.startBase();
await createRules(rulesApi.url, [
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
]);
const gateway = await stack.startGateway('gateway', upstream.url, rulesApi.url, { REDIS_URL: redis.url });

const bareUrl = `${bare.url}/ok/item`;
const admitUrl = `${gateway.url}/ok/item`;
const stackedUrl = `${gateway.url}/stacked/item`;
const windowUrl = `${gateway.url}/window/item`;
const denyUrl = `${gateway.url}/denied/item`;
/** the stacked rule's per-key limits are keyed by this header: one API key for the whole run */
const stackedHeaders = { 'x-api-key': 'bench-key' };

/** Decisions the gateway's STORE_FAILURE policy took instead of Redis (slow or failed store calls). */
async function gatewayFallbacks(): Promise<number> {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('sluice_store_fallbacks_total{'))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function cannon(
  url: string,
  seconds: number,
  proxyPid: number | undefined,
  headers: Record<string, string> = {},
): Promise<RoundResult> {
  return await closedLoopRound({
    url,
    seconds,
    connections: CONNECTIONS,
    headers,
    pids: { proxy: proxyPid, upstream: upstream.child.pid, redis: redis.child.pid },
    redisCounters: redis.counters,
    ...(proxyPid === gateway.child.pid ? { fallbacks: gatewayFallbacks } : {}),
  });
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

await stack.stop();
