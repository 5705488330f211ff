// Lease mode beside a bare @fastify/http-proxy in front of the same upstream, in one run. Same setup as
// gateway.ts: every server (upstream, bare proxy, rules API, gateways, a private redis-server) pinned
// to CPU 1, this load generator to CPU 0.
//
// Part 1, G-allow: closed loop (autocannon, pipelining 1, BENCH_CONNECTIONS connections), BENCH_ROUNDS
// interleaved rounds of BENCH_SECONDS: bare, a lease-mode rule that admits everything (one global key),
// and the same rule in exact mode. Redis calls (EVALSHA, from the private Redis's INFO commandstats,
// lease returns included) per admitted request.
//
// Each round reports CPU µs per request of the gateway and of Redis (from /proc), Redis data commands and
// EVALSHA calls per request (INFO commandstats), beside req/s.
//
// Part 2, accuracy: for 1, 2, 4 and 8 gateways (BENCH_GATEWAYS) on the one Redis, paced load on ONE key
// (BENCH_PACED_RPS in total, spread evenly over the gateways, above the limit) for BENCH_ACCURACY_SECONDS
// per mode: admitted / (capacity + rate·T), T from the first request sent to the last answer, and Redis
// calls per request. Each run uses a key of its own (a fresh, full bucket).
//
// Part 3, at the limit: 3 gateways, 300 req/s paced over them for BENCH_ACCURACY_SECONDS, one global
// key admitting 60 a second (a hot key under a flood: what lease mode is for), per mode: script calls per
// request and admitted / (capacity + rate·T).
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_GATEWAYS ("1,2,4,8"),
// BENCH_ACCURACY_SECONDS (10), BENCH_PACED_RPS (400), BENCH_LEASE_MS (100).
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { closedLoopRound, closedLoopSettings, type RoundResult } from './_lib/closed-loop.js';
import { createRules, type Gateway, nodeCommandsFromEnv, pinSelf, SERVER_CPU, Stack } from './_lib/stack.js';

const { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS } = closedLoopSettings();

pinSelf();

const loadAtStart = loadavg()[0]!;
const stack = new Stack(nodeCommandsFromEnv());
const { redis, upstream, bare, rulesApi } = await stack.startBase();
const GATEWAY_COUNTS = (process.env.BENCH_GATEWAYS ?? '1,2,4,8').split(',').map(Number);
const ACCURACY_SECONDS = Number(process.env.BENCH_ACCURACY_SECONDS ?? 10);
const PACED_RPS = Number(process.env.BENCH_PACED_RPS ?? 400);
const LEASE_MS = process.env.BENCH_LEASE_MS ?? '100';
/** the accuracy rules' bucket: 100 tokens, 200 per second (the paced load offers twice that) */
const CAPACITY = 100;
const RATE_PER_S = 200;
/** the hot key at its limit: 60 tokens, 60 a second, offered 300 a second over 3 gateways */
const HOT = { capacity: 60, ratePerS: 60, offeredRps: 300, gateways: 3 };

await createRules(
  rulesApi.url,
  [
    // one global key, never short: every request admitted
    { name: 'allow-lease', mode: 'lease', capacity: 1e9 },
    { name: 'allow-exact', mode: 'exact', capacity: 1e9 },
    // one key per run (header x-key), 100 tokens, 200/s
    { name: 'paced-lease', mode: 'lease', capacity: CAPACITY, refill: RATE_PER_S, client: 'header' },
    { name: 'paced-exact', mode: 'exact', capacity: CAPACITY, refill: RATE_PER_S, client: 'header' },
    // the hot key, one per run as well (header x-key), so each run starts full
    { name: 'hot-lease', mode: 'lease', capacity: HOT.capacity, refill: HOT.ratePerS, client: 'header' },
    { name: 'hot-exact', mode: 'exact', capacity: HOT.capacity, refill: HOT.ratePerS, client: 'header' },
  ].map((rule) => ({
    name: rule.name,
    match: { path: `/${rule.name}/**` },
    client: rule.client === 'header' ? { by: 'header', name: 'x-key' } : { by: 'global' },
    limit: { capacity: rule.capacity, refill: rule.refill ?? rule.capacity, period: '1s' },
    maxDebt: 0,
    mode: rule.mode,
  })),
);

const gateways: Gateway[] = [];
for (let i = 0; i < Math.max(...GATEWAY_COUNTS); i++) {
  gateways.push(
    await stack.startGateway(`gateway ${i + 1}`, upstream.url, rulesApi.url, {
      REDIS_URL: redis.url,
      LEASE_MS,
      // a slow answer on the busy core must not hand decisions to the STORE_FAILURE policy (an
      // in-process bucket per gateway): that is not what this bench measures; fallbacks are printed
      STORE_TIMEOUT_MS: '1000',
    }),
  );
}
const gatewayPorts = gateways.map((g) => g.port);

async function evalshaCalls(): Promise<number> {
  return (await redis.counters()).evalsha;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

function cannon(url: string, seconds: number, proxyPid: number | undefined): Promise<RoundResult> {
  return closedLoopRound({
    url,
    seconds,
    connections: CONNECTIONS,
    pids: { proxy: proxyPid, upstream: upstream.child.pid, redis: redis.child.pid },
    redisCounters: redis.counters,
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const fmt = (n: number, d = 0) => n.toFixed(d);

// Part 1: G-allow beside the bare proxy
const bareUrl = `${bare.url}/ok/item`;
const leaseUrl = `${gateways[0]!.url}/allow-lease/item`;
const exactUrl = `${gateways[0]!.url}/allow-exact/item`;
// no rule matches: the gateway's own cost without any limiter, the most lease mode can approach
const freeUrl = `${gateways[0]!.url}/free/item`;
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
  for (const gateway of gateways.slice(0, count)) {
    const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text();
    for (const match of text.matchAll(/^sluice_store_fallbacks_total\{[^}]*\} (\S+)$/gm))
      total += Number(match[1]);
  }
  return total;
}

interface AccuracyResult {
  /** admitted per second allowed at most: capacity + rate·T */
  requests: number;
  admitted: number;
  other: number;
  bound: number;
  callsPerRequest: number;
  fallbacks: number;
}

let run = 0;
async function paced(
  rule: string,
  count: number,
  offeredRps: number,
  bucket: { capacity: number; ratePerS: number },
): Promise<AccuracyResult> {
  const key = `run-${++run}`;
  const ports = gatewayPorts.slice(0, count);
  const tickMs = 5;
  const perTick = (offeredRps * tickMs) / 1000;
  const before = await evalshaCalls();
  const fallbacksBefore = await fallbacks(count);
  const pending: Promise<number>[] = [];
  const startedAt = performance.now();
  let sent = 0;
  while (performance.now() - startedAt < ACCURACY_SECONDS * 1000) {
    // paced: as many sends as the schedule says by now, round-robin over the gateways
    const due = Math.floor(((performance.now() - startedAt) / tickMs) * perTick);
    for (; sent < due; sent++) pending.push(send(ports[sent % count]!, `/${rule}/item`, key));
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
    bound: bucket.capacity + bucket.ratePerS * elapsedS,
    callsPerRequest: calls / statuses.length,
    fallbacks: (await fallbacks(count)) - fallbacksBefore,
  };
}

const accuracy: { count: number; exact: AccuracyResult; lease: AccuracyResult }[] = [];
const pacedBucket = { capacity: CAPACITY, ratePerS: RATE_PER_S };
for (const count of GATEWAY_COUNTS) {
  const exact = await paced('paced-exact', count, PACED_RPS, pacedBucket);
  const lease = await paced('paced-lease', count, PACED_RPS, pacedBucket);
  accuracy.push({ count, exact, lease });
}
const hotCount = Math.min(HOT.gateways, gateways.length);
const hot = {
  exact: await paced('hot-exact', hotCount, HOT.offeredRps, HOT),
  lease: await paced('hot-lease', hotCount, HOT.offeredRps, HOT),
};

const bareRps = median(scenarios.bare.map((r) => r.rps));
const bareCpu = median(scenarios.bare.map((r) => r.cpuUs.proxy));
console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s, ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; LEASE_MS ${LEASE_MS}; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| scenario | proxy CPU µs/req | Redis CPU µs/req | proxy + Redis over bare | Redis commands/req | script calls/req (FCALL or EVALSHA) | target | req/s (median) | vs bare | non-2xx or failed |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |');
for (const [label, key, target] of [
  ['bare @fastify/http-proxy', 'bare', ''],
  ['gateway, no rule matches (no limiter at all)', 'free', ''],
  ['gateway, lease mode, one global key', 'lease', '≤ bare + 3 µs'],
  ['gateway, exact mode, same rule', 'exact', ''],
] as const) {
  const runs = scenarios[key];
  const proxy = median(runs.map((r) => r.cpuUs.proxy));
  const red = median(runs.map((r) => r.cpuUs.redis));
  const rps = median(runs.map((r) => r.rps));
  const per = (field: 'evalshaPerResponse' | 'commandsPerResponse') =>
    sum(runs.map((r) => r[field] * r.responses)) / sum(runs.map((r) => r.responses));
  const other = sum(runs.map((r) => r.responses - r.status2xx + r.errors));
  const over = key === 'bare' ? '' : `${proxy + red - bareCpu >= 0 ? '+' : ''}${fmt(proxy + red - bareCpu)}`;
  console.log(
    `| ${label} | ${fmt(proxy)} | ${fmt(red)} | ${over} | ${fmt(per('commandsPerResponse'), 3)} | ${fmt(per('evalshaPerResponse'), 4)} | ${target} | ${fmt(rps)} | ${fmt(rps / bareRps, 2)} | ${other} |`,
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
console.log(
  `\nAt the limit: one key, bucket of ${HOT.capacity} tokens refilled at ${HOT.ratePerS}/s, ${HOT.offeredRps} req/s paced over ${hotCount} gateways for ${ACCURACY_SECONDS} s; targets (lease): ≤ 0.2 script calls per request, admitted / bound within [0.95, 1.0]\n`,
);
console.log(
  '| mode | admitted / bound | Redis calls per request | requests | non-2xx/429 | policy fallbacks |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
for (const mode of ['exact', 'lease'] as const) {
  const r = hot[mode];
  console.log(
    `| ${mode} | ${fmt(r.admitted / r.bound, 3)} (${r.admitted} / ${fmt(r.bound, 1)}) | ${fmt(r.callsPerRequest, 3)} | ${r.requests} | ${r.other} | ${r.fallbacks} |`,
  );
}
if (loadAtStart > 0.5)
  console.log('\nnote: the machine was not idle at start; rerun when `uptime` shows a low load');

agent.destroy();
await stack.stop();
