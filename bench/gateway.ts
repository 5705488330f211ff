// Gateway throughput and latency beside a bare @fastify/http-proxy in front of the same upstream.
//
// Setup: every server (upstream, bare proxy, rules API, gateway, a private redis-server) is pinned to
// CPU 1, this load generator to CPU 0, so neither side steals the other's core on a 2-core machine.
// Redis is a server too: it stays on CPU 1, so the gateway pays for its store on the same core the bare
// proxy has to itself (the per-process CPU column shows that share).
//
// Closed loop: autocannon, pipelining 1, BENCH_CONNECTIONS connections, one warm-up, BENCH_ROUNDS
// interleaved rounds of BENCH_SECONDS (bare; a single-limit rule, a stacked rule of three limits and a
// sliding-window rule, every request admitted; a denied flood; with a baseline, each of these four on
// the baseline build too, beside ours, which first alternating from round to round, and a before/after
// table of the four), medians reported. Script calls (FCALL
// of the limiter's Redis Function, or EVALSHA on Redis 5 and 6) are read from Redis `INFO
// commandstats` around each round and divided by the responses of that round.
// The gateway batches its script calls (the default: the decisions of one event-loop turn leave as one
// call), so script calls per request are below 1 under concurrent load, each decision still exact.
// Open loop: an evenly paced client at half the bare proxy's median rate, interleaved, p50 and p99 from the
// scheduled send time (see _lib/open-loop.ts for how it keeps itself out of the measurement); the
// median of the rounds' p50 is compared. Its recorded requests' work is read too (CPU µs per request
// of the proxy and of Redis, script calls per request): evenly paced requests seldom share an
// event-loop turn, so there an exact decision costs about one script call of its own.
//
// What each request costs is read beside its speed: CPU µs per response of the proxy process and of
// Redis (from /proc, on the shared server CPU), Redis data commands per response (INFO commandstats,
// the commands a script runs included) and script calls per response. The yardstick beside the bare
// proxy is @fastify/rate-limit on the same Redis (_lib/rate-limited-proxy.ts).
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_OPEN_ROUNDS (open-loop
// rounds, max(BENCH_ROUNDS, 5)), BENCH_CPU_PROF=<dir> (write V8 CPU profiles of the gateway and the
// bare proxy there; slows both), BENCH_SERVER_NODE_FLAGS (extra node flags for every Node server,
// the same for all, e.g. `--single-threaded-gc`; none by default), BENCH_BASELINE_GATEWAY=<path of
// another build's apps/gateway/dist/server.js> (runs the single-limit scenario through that build
// too, in the same rounds: a before/after in one run).
import { loadavg } from 'node:os';
import { closedLoopRound, closedLoopSettings, type RoundResult } from './_lib/closed-loop.js';
import { cpuMs } from './_lib/cpu-time.js';
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
  // daily quota per API key, a cap for everyone), decided by one script call per request
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
const rateLimited = await stack.startRateLimitedProxy(upstream.url, redis.url);
const baseline = await stack.startBaselineGateway(upstream.url, rulesApi.url, redis.url);

/** the stacked rule's per-key limits are keyed by this header: one API key for the whole run */
const stackedHeaders = { 'x-api-key': 'bench-key' };

interface Scenario {
  label: string;
  url: string;
  pid: number | undefined;
  headers?: Record<string, string>;
  /** what the issue asks of it */
  target: string;
  /** every response is expected to be this status */
  status: 200 | 429;
  rounds: RoundResult[];
}
const scenario = (
  label: string,
  server: { url: string; child: { pid?: number } },
  path: string,
  target: string,
  status: 200 | 429 = 200,
  headers?: Record<string, string>,
): Scenario => ({
  label,
  url: `${server.url}${path}`,
  pid: server.child.pid,
  target,
  status,
  headers,
  rounds: [],
});
const ours = {
  admit: scenario(
    'Sluice, one token bucket, exact (batched)',
    gateway,
    '/ok/item',
    '≤ bare + 12 µs, < @fastify/rate-limit',
  ),
  stacked: scenario(
    'Sluice, three stacked limits',
    gateway,
    '/stacked/item',
    '≤ bare + 20 µs',
    200,
    stackedHeaders,
  ),
  window: scenario('Sluice, one sliding window', gateway, '/window/item', ''),
  deny: scenario('Sluice, denied flood (denial cache)', gateway, '/denied/item', '0 Redis calls', 429),
} as Record<string, Scenario>;
/**
 * With a baseline, each of our scenarios has a twin on the baseline build (same path, same rule): a
 * before/after of every variant in one run. `pairs` maps our scenario's key to its twin's.
 */
const twins: Record<string, Scenario> = {};
const pairs = new Map<string, string>();
if (baseline) {
  for (const [key, s] of Object.entries(ours)) {
    const path = s.url.slice(gateway.url.length);
    twins[`${key}Before`] = scenario(
      `baseline build: ${s.label.replace(/^Sluice, /, '')}`,
      baseline,
      path,
      '(before)',
      s.status,
      s.headers,
    );
    pairs.set(key, `${key}Before`);
  }
}
const scenarios = {
  bare: scenario('bare @fastify/http-proxy', bare, '/ok/item', ''),
  rateLimit: scenario(
    '@fastify/rate-limit on Redis (fixed window, not batched)',
    rateLimited,
    '/ok/item',
    '',
  ),
  ...Object.fromEntries(
    Object.entries(ours).flatMap(([key, s]) =>
      pairs.has(key)
        ? [
            [key, s],
            [pairs.get(key)!, twins[pairs.get(key)!]!],
          ]
        : [[key, s]],
    ),
  ),
} as Record<string, Scenario>;

/** Decisions the gateway's STORE_FAILURE policy took instead of Redis (slow or failed store calls). */
async function gatewayFallbacks(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('sluice_store_fallbacks_total{'))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function cannon(s: Scenario, seconds: number): Promise<RoundResult> {
  const adminUrl =
    s.pid === gateway.child.pid
      ? gateway.adminUrl
      : s.pid === baseline?.child.pid
        ? baseline?.adminUrl
        : undefined;
  return await closedLoopRound({
    url: s.url,
    seconds,
    connections: CONNECTIONS,
    headers: s.headers ?? {},
    pids: { proxy: s.pid, upstream: upstream.child.pid, redis: redis.child.pid },
    redisCounters: redis.counters,
    ...(adminUrl ? { fallbacks: () => gatewayFallbacks(adminUrl) } : {}),
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

// warm-up (JIT tiers, connection pools, the Redis script cache, the denial cache); with 1 s the
// first measured round still ran slow
for (const s of Object.values(scenarios)) await cannon(s, 3);
// each of our scenarios and its baseline twin run back to back, which first alternating from round to
// round: neither build always runs after the other
const inRound = (i: number): Scenario[] => {
  const order = Object.values(scenarios);
  if (i % 2 === 0) return order;
  for (const [key, twinKey] of pairs) {
    const at = order.indexOf(scenarios[key]!);
    [order[at], order[at + 1]] = [scenarios[twinKey]!, scenarios[key]!];
  }
  return order;
};
for (let i = 0; i < ROUNDS; i++) {
  for (const s of inRound(i)) s.rounds.push(await cannon(s, SECONDS));
}
const warnings: string[] = [];
for (const [name, s] of Object.entries(scenarios)) {
  const expected = sum(s.rounds.map((r) => (s.status === 200 ? r.status2xx : r.status429)));
  const other = sum(s.rounds.map((r) => r.responses + r.errors)) - expected;
  if (expected === 0) warnings.push(`${name} rounds saw no ${s.status}`);
  if (other > 0) warnings.push(`${name} rounds: ${other} responses were not ${s.status} or failed`);
  const fallbacks = sum(s.rounds.map((r) => r.fallbacks));
  // a decision the fallback took costs no script call: that scenario's calls per request are then lower
  if (fallbacks > 0)
    warnings.push(
      `${name} rounds: ${fallbacks} decisions were taken by STORE_FAILURE=local, not Redis (Redis slower than STORE_TIMEOUT_MS)`,
    );
}
const bareUrl = scenarios.bare!.url;
const admitUrl = scenarios.admit!.url;

// Latency at half the bare proxy's max rate, open loop, interleaved.
const bareRps = median(scenarios.bare!.rounds.map((r) => r.rps));
const rate = Math.round(bareRps / 2);
/** An open-loop run with what the servers did for its recorded requests. */
interface OpenRound extends OpenLoopResult {
  /** CPU µs per response of the proxy process and of Redis */
  proxyUs: number;
  redisUs: number;
  scriptCallsPerResponse: number;
}
async function openRound(url: string, pid: number | undefined): Promise<OpenRound> {
  let cpuBefore = { proxy: 0, redis: 0 };
  let cpuAfter = cpuBefore;
  let callsBefore = 0;
  let callsAfter = 0;
  const result = await openLoop(url, rate, SECONDS * 1000, {
    window: {
      opens: async () => {
        callsBefore = (await redis.counters()).evalsha;
        cpuBefore = { proxy: cpuMs(pid), redis: cpuMs(redis.child.pid) };
      },
      closes: async () => {
        cpuAfter = { proxy: cpuMs(pid), redis: cpuMs(redis.child.pid) };
        callsAfter = (await redis.counters()).evalsha;
      },
    },
  });
  const responses = Math.max(1, result.ok + result.errors);
  return {
    ...result,
    proxyUs: ((cpuAfter.proxy - cpuBefore.proxy) * 1000) / responses,
    redisUs: ((cpuAfter.redis - cpuBefore.redis) * 1000) / responses,
    scriptCallsPerResponse: (callsAfter - callsBefore) / responses,
  };
}
const openBare: OpenRound[] = [];
const openAdmit: OpenRound[] = [];
for (let i = 0; i < OPEN_ROUNDS; i++) {
  openBare.push(await openRound(bareUrl, scenarios.bare!.pid));
  openAdmit.push(await openRound(admitUrl, scenarios.admit!.pid));
}
for (const [name, runs] of [
  ['bare', openBare],
  ['gateway', openAdmit],
] as const) {
  const bound = runs.filter((r) => r.clientBound).length;
  if (bound > 0) warnings.push(`open loop ${name}: the client lagged or missed its rate in ${bound} run(s)`);
}

// ---- report ----
const fmt = (n: number, d = 0) => n.toFixed(d);
const perResponse = (runs: RoundResult[], key: 'evalshaPerResponse' | 'commandsPerResponse') =>
  sum(runs.map((r) => r[key] * r.responses)) / sum(runs.map((r) => r.responses));
const p = (runs: OpenRound[], key: 'p50Ms' | 'p99Ms' | 'sendLagP99Ms' | 'achievedRps', d = 2) =>
  fmt(median(runs.map((r) => r[key])), d);
const bareCpu = median(scenarios.bare!.rounds.map((r) => r.cpuUs.proxy));

console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s (open loop: ${OPEN_ROUNDS}), ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| scenario | proxy CPU µs/req | Redis CPU µs/req | proxy + Redis over bare | Redis commands/req | script calls/req (FCALL or EVALSHA) | req/s (median) | vs bare | target |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |');
for (const s of Object.values(scenarios)) {
  const proxy = median(s.rounds.map((r) => r.cpuUs.proxy));
  const red = median(s.rounds.map((r) => r.cpuUs.redis));
  const rps = median(s.rounds.map((r) => r.rps));
  const over =
    s === scenarios.bare ? '' : `${proxy + red - bareCpu >= 0 ? '+' : ''}${fmt(proxy + red - bareCpu)}`;
  console.log(
    `| ${s.label} | ${fmt(proxy)} | ${fmt(red)} | ${over} | ${fmt(perResponse(s.rounds, 'commandsPerResponse'), 2)} | ${fmt(perResponse(s.rounds, 'evalshaPerResponse'), 3)} | ${fmt(rps)} | ${fmt(rps / bareRps, 2)} | ${s.target} |`,
  );
}
if (pairs.size > 0) {
  console.log('\n| variant | this build: proxy + Redis CPU µs/req | baseline build | this / baseline |');
  console.log('| --- | ---: | ---: | ---: |');
  const work = (s: Scenario) =>
    median(s.rounds.map((r) => r.cpuUs.proxy)) + median(s.rounds.map((r) => r.cpuUs.redis));
  for (const [key, twinKey] of pairs) {
    const now = work(scenarios[key]!);
    const before = work(scenarios[twinKey]!);
    console.log(`| ${key} | ${fmt(now, 1)} | ${fmt(before, 1)} | ${fmt(now / before, 3)} |`);
  }
}
console.log(
  `\nper-round req/s: ${Object.entries(scenarios)
    .map(([k, s]) => `${k} ${s.rounds.map((r) => fmt(r.rps)).join(' / ')}`)
    .join('; ')}`,
);
console.log(
  `per-round proxy CPU µs/req: ${Object.entries(scenarios)
    .map(([k, s]) => `${k} ${s.rounds.map((r) => fmt(r.cpuUs.proxy)).join(' / ')}`)
    .join('; ')}\n`,
);
console.log('| measure | value | target |');
console.log('| --- | ---: | --- |');
console.log(
  `| Redis socket reads per script call (admit) | ${fmt(median(scenarios.admit!.rounds.map((r) => r.redisReadsPerEvalsha)), 2)} | |`,
);
console.log(
  `| open-loop at ${rate} req/s, bare: achieved req/s, p50, p99 (client send lag p99) | ${p(openBare, 'achievedRps', 0)}, ${p(openBare, 'p50Ms')} ms, ${p(openBare, 'p99Ms')} ms (${p(openBare, 'sendLagP99Ms')} ms) | |`,
);
const p50Over = median(openAdmit.map((r) => r.p50Ms)) - median(openBare.map((r) => r.p50Ms));
console.log(
  `| open-loop at ${rate} req/s, gateway: achieved req/s, p50, p99 (client send lag p99) | ${p(openAdmit, 'achievedRps', 0)}, ${p(openAdmit, 'p50Ms')} ms, ${p(openAdmit, 'p99Ms')} ms (${p(openAdmit, 'sendLagP99Ms')} ms) | p50 ≤ bare + 0.5 ms, median of ${OPEN_ROUNDS} rounds (${p50Over >= 0 ? '+' : ''}${fmt(p50Over, 2)} ms) |`,
);
// evenly paced requests seldom share a turn: most are decided by a script call of their own, so the
// open loop's price per request is a lone call's, not the closed loop's batched one
const openWork = (runs: OpenRound[]) =>
  `${fmt(median(runs.map((r) => r.proxyUs)))} + ${fmt(median(runs.map((r) => r.redisUs)))} µs, ${fmt(median(runs.map((r) => r.scriptCallsPerResponse)), 3)} script calls`;
console.log(`| open-loop, bare: proxy + Redis CPU per request | ${openWork(openBare)} | |`);
console.log(
  `| open-loop, gateway: proxy + Redis CPU per request, script calls per request | ${openWork(openAdmit)} | |`,
);
console.log(
  `\nopen-loop p99 per round (ms): bare ${openBare.map((r) => fmt(r.p99Ms, 2)).join(' / ')}; gateway ${openAdmit.map((r) => fmt(r.p99Ms, 2)).join(' / ')}`,
);
for (const w of warnings) console.log(`warning: ${w}`);
if (loadAtStart > 0.5)
  console.log('note: the machine was not idle at start; rerun when `uptime` shows a low load');

await stack.stop();
