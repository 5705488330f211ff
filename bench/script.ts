// The limiter script's own work in Redis (issue "the hot path's price": ≤ 5 µs of Redis CPU per
// token-bucket decision): a RedisStore drives decisions straight at a private redis-server (no HTTP,
// no gateway), CONCURRENCY at a time so that batching packs that many into one script call, and the
// bench reads Redis's CPU time (/proc) and INFO commandstats around a bounded number of decisions,
// and its own CPU time: the calling side of the same decisions (a call's cost to the gateway).
//
// BENCH_SCRIPT_DECISIONS (60000) per scenario and round, BENCH_ROUNDS (3) interleaved rounds, medians.
// BENCH_BASELINE_SHARED=<another checkout>/packages/shared/dist adds that build's store (its script)
// to the same rounds, on the same Redis, under another key prefix: a before/after in one run.
// BENCH_EVALSHA=1 adds this build's store calling the script by EVALSHA (`functions: false`, as on
// Redis 5 and 6) beside its Redis Function: what the library buys, in the same rounds.
// BENCH_CALLGRIND=1 runs Redis under valgrind's callgrind and reports the instructions Redis ran per
// decision instead of its CPU time: within a few per cent run after run, on a machine as noisy as ours
// (one round of BENCH_SCRIPT_DECISIONS, 4000 by default: callgrind is about 50 times slower).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { LimitCheck, LimitSpec, Settlement } from '../packages/shared/src/limiter/limits.js';
import { RedisStore } from '../packages/shared/src/limiter/redis-store.js';
import { instructionsSinceLastDump } from './_lib/callgrind.js';
import { cpuMs } from './_lib/cpu-time.js';
import { pinSelf, Stack } from './_lib/stack.js';

pinSelf();

const CALLGRIND = process.env.BENCH_CALLGRIND === '1';
const DECISIONS = Number(process.env.BENCH_SCRIPT_DECISIONS ?? (CALLGRIND ? 4_000 : 60_000));
const ROUNDS = CALLGRIND ? 1 : Number(process.env.BENCH_ROUNDS ?? 3);
const CLIENTS = 64; // distinct keys per limit: a batch mostly touches different keys, as many clients' do

interface StoreLike {
  ready(): Promise<unknown>;
  acquire(checks: readonly LimitCheck[]): Promise<{ allowed: boolean; atMs?: number }>;
  settle(settlements: readonly Settlement[]): Promise<unknown>;
  close(): Promise<void>;
}

const bucket: LimitSpec = {
  algorithm: 'token-bucket',
  capacity: 1e9,
  refill: 1e9,
  periodMs: 1000,
  maxDebt: 0,
};
const window: LimitSpec = { algorithm: 'sliding-window', max: 1e9, windowMs: 60_000 };
const slots: LimitSpec = { algorithm: 'concurrency', max: 1e6, leaseMs: 35_000 };

interface Scenario {
  name: string;
  concurrency: number;
  specs: readonly LimitSpec[];
  /** distinct clients (keys per limit), CLIENTS unless said: 1 is one hot client, whose batches hit one key */
  clients?: number;
}
const scenarios: Scenario[] = [
  { name: 'token bucket, one call per decision', concurrency: 1, specs: [bucket] },
  { name: 'token bucket, batches of up to 4', concurrency: 4, specs: [bucket] },
  { name: 'token bucket, batches of up to 16', concurrency: 16, specs: [bucket] },
  { name: 'token bucket, one hot key, batches of up to 16', concurrency: 16, specs: [bucket], clients: 1 },
  { name: 'sliding window, batches of up to 16', concurrency: 16, specs: [window] },
  { name: 'three stacked limits, batches of up to 16', concurrency: 16, specs: [bucket, bucket, window] },
  {
    name: 'three stacked limits, one hot client, batches of up to 16',
    concurrency: 16,
    specs: [bucket, bucket, window],
    clients: 1,
  },
  { name: 'concurrency take + give back, up to 16', concurrency: 16, specs: [slots] },
  {
    name: 'concurrency take + give back, one hot client, up to 16',
    concurrency: 16,
    specs: [slots],
    clients: 1,
  },
];

let leaseIds = 0;
/** One request: acquire every limit; a concurrency slot is given back when it is admitted. */
async function decide(store: StoreLike, specs: readonly LimitSpec[], client: number): Promise<void> {
  const checks: LimitCheck[] = specs.map((spec, k) => ({
    key: `{bench:c${client}}:${spec.algorithm}:l${k}`, // a key holds one algorithm's state
    spec,
    cost: 1,
    ...(spec.algorithm === 'concurrency' ? { leaseId: `b${leaseIds++}` } : {}),
  }));
  const decision = await store.acquire(checks);
  const held = checks.filter((c) => c.spec.algorithm === 'concurrency');
  if (decision.allowed && held.length > 0) {
    await store.settle(
      held.map((c) => ({
        key: c.key,
        spec: c.spec,
        delta: 0,
        admittedAtMs: decision.atMs ?? 0,
        leaseId: c.leaseId,
      })),
    );
  }
}

async function drive(store: StoreLike, scenario: Scenario, decisions: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < decisions) await decide(store, scenario.specs, next++ % (scenario.clients ?? CLIENTS));
  };
  await Promise.all(Array.from({ length: scenario.concurrency }, worker));
}

const stack = new Stack({ tsx: [], profiledTsx: [], gateway: [] });
const callgrindDir = CALLGRIND ? mkdtempSync(join(tmpdir(), 'sluice-callgrind-')) : undefined;
const redis = await stack.startRedis({ callgrindDir });
/** What Redis ran while `run` ran: instructions under callgrind, CPU µs otherwise. */
async function redisWorkDuring(run: () => Promise<void>): Promise<number> {
  if (callgrindDir) {
    instructionsSinceLastDump(redis.child.pid!, callgrindDir); // zeroes callgrind's counters
    await run();
    return instructionsSinceLastDump(redis.child.pid!, callgrindDir);
  }
  const before = cpuMs(redis.child.pid);
  await run();
  return (cpuMs(redis.child.pid) - before) * 1000;
}
// a slow Redis (callgrind) must not make a call time out: it is its work that is measured here
const storeOptions = { commandTimeoutMs: 60_000 };
const stores: { label: string; store: StoreLike }[] = [
  { label: 'this build', store: new RedisStore(redis.url, { keyPrefix: 'now:', ...storeOptions }) },
];
if (process.env.BENCH_EVALSHA === '1') {
  stores.push({
    label: 'this build, EVALSHA',
    store: new RedisStore(redis.url, { keyPrefix: 'eval:', functions: false, ...storeOptions }),
  });
}
if (process.env.BENCH_BASELINE_SHARED) {
  const url = pathToFileURL(`${process.env.BENCH_BASELINE_SHARED}/redis.js`).href;
  const { RedisStore: BaselineStore } = (await import(url)) as { RedisStore: typeof RedisStore };
  stores.push({
    label: 'baseline',
    store: new BaselineStore(redis.url, { keyPrefix: 'base:', ...storeOptions }),
  });
}

interface Sample {
  /** CPU µs, or instructions under callgrind */
  redisWork: number;
  /** this process's CPU µs: the calling side of the same decisions (the gateway's share, without HTTP) */
  clientUs: number;
  commands: number;
  calls: number;
}
const samples = new Map<string, Sample[]>();
for (const { store } of stores) await store.ready();
for (const scenario of scenarios)
  for (const { store } of stores) await drive(store, scenario, CALLGRIND ? 200 : 2_000); // warm-up
for (let round = 0; round < ROUNDS; round++) {
  for (const scenario of scenarios) {
    for (const { label, store } of stores) {
      const before = await redis.counters();
      const clientBefore = process.cpuUsage();
      const work = await redisWorkDuring(() => drive(store, scenario, DECISIONS));
      const client = process.cpuUsage(clientBefore);
      const after = await redis.counters();
      const key = `${scenario.name}\t${label}`;
      const list = samples.get(key) ?? [];
      list.push({
        redisWork: work / DECISIONS,
        clientUs: (client.user + client.system) / DECISIONS,
        commands: (after.commands - before.commands) / DECISIONS,
        calls: (after.evalsha - before.evalsha) / DECISIONS,
      });
      samples.set(key, list);
    }
  }
}
for (const { store } of stores) await store.close();
await stack.stop();

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const unit = CALLGRIND ? 'Redis instructions / decision (callgrind)' : 'Redis CPU µs / decision';
console.log(
  CALLGRIND
    ? `${DECISIONS} decisions per scenario, Redis under callgrind (instructions: within a few per cent from run to run)\n`
    : `${DECISIONS} decisions per scenario and round, ${ROUNDS} rounds, medians; Redis pinned to its own core\n`,
);
console.log(
  `| scenario | build | ${unit} | Redis commands / decision | script calls / decision | this process's CPU µs / decision |`,
);
console.log('| --- | --- | ---: | ---: | ---: | ---: |');
for (const [key, list] of samples) {
  const [scenario, label] = key.split('\t');
  const work = median(list.map((s) => s.redisWork));
  console.log(
    `| ${scenario} | ${label} | ${CALLGRIND ? Math.round(work) : work.toFixed(2)} | ${median(list.map((s) => s.commands)).toFixed(2)} | ${median(list.map((s) => s.calls)).toFixed(3)} | ${median(list.map((s) => s.clientUs)).toFixed(2)} |`,
  );
}
if (callgrindDir) rmSync(callgrindDir, { recursive: true, force: true });
process.exit(0);
