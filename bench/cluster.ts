// G-allow (every request admitted, a decision in Redis each) with the store on a Redis Cluster of 3
// masters (1 replica each) beside the same gateway on one Redis, in one run. Clients are spread over
// 30 header keys, so the cluster gateway's decisions land on all three masters.
//
// Setup as gateway.ts: every server (upstream, rules API, both gateways, the single Redis and all six
// cluster nodes) pinned to CPU 1, this load generator to CPU 0. Closed loop: autocannon, pipelining 1,
// BENCH_CONNECTIONS connections, one warm-up, BENCH_ROUNDS interleaved rounds of BENCH_SECONDS (one
// Redis, cluster), medians. On one machine a cluster cannot be faster than one Redis (all its nodes
// share the core, and the replicas take their copy); the ratio shows what the cluster client costs the
// gateway, not what a cluster of real machines gains.
//
// Env: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16).
import { spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { startRedisCluster } from '@sluice/test-support';
import autocannon from 'autocannon';
import { closedLoopSettings } from './_lib/closed-loop.js';
import { cpuMs } from './_lib/cpu-time.js';
import { createRules, nodeCommands, pinSelf, SERVER_CPU, Stack } from './_lib/stack.js';

const { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS } = closedLoopSettings();
const CLIENTS = 30;

// no extra node flags, here or for the servers, and no profiles
pinSelf([]);

const loadAtStart = loadavg()[0]!;
const stack = new Stack(nodeCommands([], undefined));
const redis = await stack.startRedis();

const cluster = await startRedisCluster();
// pin every cluster node to the servers' CPU, like the single Redis
const clusterPids: number[] = [];
process.on('exit', () => {
  // a bench that fails half-way must not leave its cluster running (close() is async: too late here)
  for (const pid of clusterPids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});
for (const node of cluster.nodes) {
  const info = await cluster.cli(node.port, 'INFO', 'server');
  const pid = Number(/process_id:(\d+)/.exec(info)?.[1]);
  clusterPids.push(pid);
  spawnSync('taskset', ['-p', '-c', SERVER_CPU, String(pid)], { stdio: 'ignore' });
}

const upstream = await stack.startUpstream();
const rulesApi = await stack.startRulesApi();
await createRules(rulesApi.url, [
  {
    name: 'bench-allow',
    match: { path: '/allow/**' },
    client: { by: 'header', name: 'x-client' },
    limit: { capacity: 1e9, refill: 1e9, period: '1s' },
  },
]);

async function startGateway(name: string, store: Record<string, string>) {
  const gateway = await stack.startGateway(name, upstream.url, rulesApi.url, store);
  return { ...gateway, url: `${gateway.url}/allow/item` };
}

const single = await startGateway('gateway on one Redis', { REDIS_URL: redis.url });
const onCluster = await startGateway('gateway on the cluster', { REDIS_CLUSTER_NODES: cluster.seeds });

const requests = Array.from({ length: CLIENTS }, (_, i) => ({ headers: { 'x-client': `c${i}` } }));

interface RoundResult {
  rps: number;
  responses: number;
  other: number;
  /** CPU µs per response: the gateway, and Redis (all six nodes for the cluster) */
  gatewayCpuUs: number;
  redisCpuUs: number;
}

async function cannon(url: string, seconds: number, gatewayPid: number, redisPids: readonly number[]) {
  const sumCpu = () => redisPids.reduce((sum, pid) => sum + cpuMs(pid), 0);
  const gatewayBefore = cpuMs(gatewayPid);
  const redisBefore = sumCpu();
  const r = await autocannon({ url, connections: CONNECTIONS, pipelining: 1, duration: seconds, requests });
  const responses = r.requests.total;
  return {
    rps: r.requests.average,
    responses,
    other: responses - r['2xx'] + r.errors + r.timeouts,
    gatewayCpuUs: ((cpuMs(gatewayPid) - gatewayBefore) * 1000) / responses,
    redisCpuUs: ((sumCpu() - redisBefore) * 1000) / responses,
  } satisfies RoundResult;
}

const singleArgs = [single.child.pid!, [redis.child.pid!]] as const;
const clusterArgs = [onCluster.child.pid!, clusterPids] as const;
await cannon(single.url, 2, ...singleArgs);
await cannon(onCluster.url, 2, ...clusterArgs);

const runs = { single: [] as RoundResult[], cluster: [] as RoundResult[] };
for (let i = 0; i < ROUNDS; i++) {
  runs.single.push(await cannon(single.url, SECONDS, ...singleArgs));
  runs.cluster.push(await cannon(onCluster.url, SECONDS, ...clusterArgs));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const fmt = (n: number, d = 0) => n.toFixed(d);
const masters = (await cluster.topology()).filter((node) => node.role === 'master');
const keysPerMaster = await Promise.all(masters.map((m) => cluster.cli(m.port, 'DBSIZE')));
console.log(
  `${ROUNDS} interleaved rounds of ${SECONDS}s, ${CONNECTIONS} connections, pipelining 1, ${CLIENTS} clients; servers and every Redis node on CPU ${SERVER_CPU}, load on CPU 0; 1-min load average ${fmt(loadAtStart, 2)} at start\n`,
);
console.log(
  '| store | req/s (median) | vs one Redis | gateway CPU µs/resp | Redis CPU µs/resp | non-2xx or failed |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
const singleRps = median(runs.single.map((r) => r.rps));
for (const [label, key] of [
  ['one Redis', 'single'],
  ['Redis Cluster, 3 masters + 3 replicas', 'cluster'],
] as const) {
  const rounds = runs[key];
  const rps = median(rounds.map((r) => r.rps));
  console.log(
    `| ${label} | ${fmt(rps)} | ${fmt(rps / singleRps, 2)} | ${fmt(median(rounds.map((r) => r.gatewayCpuUs)))} | ${fmt(median(rounds.map((r) => r.redisCpuUs)))} | ${rounds.reduce((s, r) => s + r.other, 0)} |`,
  );
}
console.log(
  `\nper-round req/s: one Redis ${runs.single.map((r) => fmt(r.rps)).join(' / ')}; cluster ${runs.cluster.map((r) => fmt(r.rps)).join(' / ')}`,
);
console.log(`bucket keys per master: ${keysPerMaster.join(' / ')}`);
if (loadAtStart > 0.5)
  console.log('note: the machine was not idle at start; rerun when `uptime` shows a low load');

await stack.stop();
await cluster.close();
process.exit(0);
