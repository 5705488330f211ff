// The lifecycle's cost (concurrency slots, charging at the response) beside a bare @fastify/http-proxy
// in front of the same upstream, in one run. Same setup as gateway.ts (_lib/stack.ts: servers and a
// private Redis on CPU 1, load on CPU 0), closed loop only: autocannon, pipelining 1, BENCH_CONNECTIONS
// connections, one warm-up, BENCH_ROUNDS interleaved rounds of BENCH_SECONDS (bare, a token
// bucket with nothing to settle as the reference, concurrency, charged; with a baseline, each rule on
// both builds back to back, which first alternating from round to round), medians. Script calls (FCALL
// or EVALSHA) per response from Redis `INFO commandstats` around each round: a concurrency rule takes
// 2 (take the slot, give it back), a charged rule 2 (admission, settlement), fewer when batched.
// Beside req/s, what each request costs: CPU µs per response of the proxy process and of Redis (from
// /proc, on the shared server CPU) and Redis data commands per response (inside scripts included).
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_CPU_PROF=<dir> (write V8
// CPU profiles of the gateway and the bare proxy there; slows both), BENCH_SERVER_NODE_FLAGS (extra
// node flags for every Node server, the same for all, e.g. `--single-threaded-gc`; none by default),
// BENCH_BASELINE_GATEWAY=<path of another build's apps/gateway/dist/server.js> (runs both scenarios
// through that build too, in the same rounds: a before/after in one run).
import { loadavg } from 'node:os';
import { closedLoopRound, closedLoopSettings, type RoundResult } from './_lib/closed-loop.js';
import { createRules, nodeCommandsFromEnv, pinSelf, SERVER_CPU, Stack } from './_lib/stack.js';

const { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS } = closedLoopSettings();

pinSelf();

const loadAtStart = loadavg()[0]!;
const stack = new Stack(nodeCommandsFromEnv());
const { redis, upstream, bare, rulesApi } = await stack.startBase();
await createRules(rulesApi.url, [
  // the reference: one token bucket that never runs dry, nothing settled after the admission (what
  // the two rules below add to an exact decision, in the same rounds)
  { name: 'bench-admit', match: { path: '/ok/**' }, limit: { capacity: 1e9, refill: 1e9, period: '1s' } },
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
]);
const gateway = await stack.startGateway('gateway', upstream.url, rulesApi.url, { REDIS_URL: redis.url });
const baseline = await stack.startBaselineGateway(upstream.url, rulesApi.url, redis.url);

const bareUrl = `${bare.url}/ok/item`;
const admitUrl = `${gateway.url}/ok/item`;
const slotsUrl = `${gateway.url}/slots/item`;
const chargedUrl = `${gateway.url}/charged/item`;

async function cannon(url: string, seconds: number, proxyPid: number | undefined): Promise<RoundResult> {
  return await closedLoopRound({
    url,
    seconds,
    connections: CONNECTIONS,
    pids: { proxy: proxyPid, upstream: upstream.child.pid, redis: redis.child.pid },
    redisCounters: redis.counters,
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

await cannon(bareUrl, 2, bare.child.pid);
await cannon(admitUrl, 2, gateway.child.pid);
await cannon(slotsUrl, 2, gateway.child.pid);
await cannon(chargedUrl, 2, gateway.child.pid);
if (baseline) {
  await cannon(`${baseline.url}/slots/item`, 2, baseline.child.pid);
  await cannon(`${baseline.url}/charged/item`, 2, baseline.child.pid);
}

const scenarios = {
  bare: [] as RoundResult[],
  admit: [] as RoundResult[],
  slots: [] as RoundResult[],
  charged: [] as RoundResult[],
  baselineSlots: [] as RoundResult[],
  baselineCharged: [] as RoundResult[],
};
for (let i = 0; i < ROUNDS; i++) {
  scenarios.bare.push(await cannon(bareUrl, SECONDS, bare.child.pid));
  scenarios.admit.push(await cannon(admitUrl, SECONDS, gateway.child.pid));
  // each rule on this build and on the baseline back to back, which of them first alternating from
  // round to round: neither build always runs after the other (a machine that drifts within a round
  // would otherwise show as a difference between builds)
  for (const [mine, theirs, path] of [
    ['slots', 'baselineSlots', '/slots/item'],
    ['charged', 'baselineCharged', '/charged/item'],
  ] as const) {
    const runMine = async () =>
      scenarios[mine].push(await cannon(`${gateway.url}${path}`, SECONDS, gateway.child.pid));
    if (!baseline) {
      await runMine();
      continue;
    }
    const runTheirs = async () =>
      scenarios[theirs].push(await cannon(`${baseline.url}${path}`, SECONDS, baseline.child.pid));
    if (i % 2 === 0) {
      await runMine();
      await runTheirs();
    } else {
      await runTheirs();
      await runMine();
    }
  }
}
const fmt = (n: number, d = 0) => n.toFixed(d);
const bareRps = median(scenarios.bare.map((r) => r.rps));
const evalshaPer = (runs: RoundResult[]) =>
  sum(runs.map((r) => r.evalshaPerResponse * r.responses)) / sum(runs.map((r) => r.responses));
const commandsPer = (runs: RoundResult[]) =>
  sum(runs.map((r) => r.commandsPerResponse * r.responses)) / sum(runs.map((r) => r.responses));
// CPU µs per response of the proxy process and of Redis, medians of the rounds (the issue's measure)
const proxyUs = (runs: RoundResult[]) => median(runs.map((r) => r.cpuUs.proxy));
const redisUs = (runs: RoundResult[]) => median(runs.map((r) => r.cpuUs.redis));
const bareUs = proxyUs(scenarios.bare) + redisUs(scenarios.bare);
console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s, ${CONNECTIONS} connections, pipelining 1; servers and Redis on CPU ${SERVER_CPU}, load on CPU 0; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| scenario | proxy CPU µs/req | Redis CPU µs/req | proxy + Redis over bare | Redis commands/req | req/s (median) | vs bare | target | script calls per response (FCALL or EVALSHA) | non-2xx or failed |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |');
console.log(
  `| bare @fastify/http-proxy | ${fmt(proxyUs(scenarios.bare))} | ${fmt(redisUs(scenarios.bare))} | | | ${fmt(bareRps)} | 1.00 | | | |`,
);
for (const [label, key, target] of [
  ['gateway, one token bucket (nothing settled: the reference)', 'admit', ''],
  ['gateway, concurrency rule (take + give back)', 'slots', '≤ bare + 20 µs, ≤ 4 commands'],
  ['gateway, charged rule (admit + settle)', 'charged', ''],
  ['baseline build, concurrency rule', 'baselineSlots', '(before)'],
  ['baseline build, charged rule', 'baselineCharged', '(before)'],
] as const) {
  const runs = scenarios[key];
  if (runs.length === 0) continue;
  const rps = median(runs.map((r) => r.rps));
  const other = sum(runs.map((r) => r.responses - r.status2xx + r.errors));
  const over = proxyUs(runs) + redisUs(runs) - bareUs;
  console.log(
    `| ${label} | ${fmt(proxyUs(runs))} | ${fmt(redisUs(runs))} | ${over >= 0 ? '+' : ''}${fmt(over)} | ${fmt(commandsPer(runs), 2)} | ${fmt(rps)} | ${fmt(rps / bareRps, 2)} | ${target} | ${fmt(evalshaPer(runs), 3)} | ${other} |`,
  );
}
console.log(
  `\nper-round req/s: ${(['bare', 'admit', 'slots', 'charged', 'baselineSlots', 'baselineCharged'] as const)
    .filter((k) => scenarios[k].length > 0)
    .map((k) => `${k} ${scenarios[k].map((r) => fmt(r.rps)).join(' / ')}`)
    .join('; ')}`,
);
console.log(
  `per-round proxy CPU µs/req: ${(
    ['bare', 'admit', 'slots', 'charged', 'baselineSlots', 'baselineCharged'] as const
  )
    .filter((k) => scenarios[k].length > 0)
    .map((k) => `${k} ${scenarios[k].map((r) => fmt(r.cpuUs.proxy)).join(' / ')}`)
    .join('; ')}`,
);
if (loadAtStart > 0.5)
  console.log('note: the machine was not idle at start; rerun when `uptime` shows a low load');

await stack.stop();
