// One exact decision in process, without HTTP: the decision core (rule match, client key, checks)
// behind the store policy, for a rule of one limit and one of three stacked limits, on the in-process
// store and on Redis (batched, CONCURRENCY decisions in flight so that a batch holds that many), and
// for a concurrency limit on Redis (the slot taken, then given back as the exchange ends at once; 64
// clients, or one hot client whose takes and give-backs ride in a row), with
// what each costs this process: CPU µs and bytes
// allocated per decision (V8's sampling heap profiler, counting what the GC already collected too).
// It is the gateway's own share of a limited request minus the HTTP work, read far more steadily than
// through HTTP (issue "the hot path's price": allocation-lean exact path).
//
// BENCH_DECISIONS (100000) per scenario and round, BENCH_ROUNDS (3) rounds, medians.
// BENCH_BASELINE_SHARED=<another checkout>/packages/shared/dist decides with that build too, in the
// same rounds (its own key prefix on the same Redis): a before/after in one run. BENCH_ONLY=<text>
// runs only the scenarios whose store column holds that text (to profile one).
import { Session } from 'node:inspector/promises';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import type { RequestFacts, Rule, RuleInput } from '../packages/shared/src/index.js';
import * as shared from '../packages/shared/src/index.js';
import * as sharedRedis from '../packages/shared/src/redis.js';
import { cpuMs } from './_lib/cpu-time.js';
import { pinSelf, Stack } from './_lib/stack.js';

pinSelf();

const DECISIONS = Number(process.env.BENCH_DECISIONS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = 16;
const CLIENTS = 64;
/** BENCH_ONLY=<text>: only the scenarios whose store column holds it (to profile one) */
const ONLY = process.env.BENCH_ONLY;

type Shared = typeof shared;
type SharedRedis = typeof sharedRedis;
const builds: { label: string; lib: Shared; redisLib: SharedRedis }[] = [
  { label: 'this build', lib: shared, redisLib: sharedRedis },
];
if (process.env.BENCH_BASELINE_SHARED) {
  const dist = process.env.BENCH_BASELINE_SHARED;
  builds.push({
    label: 'baseline',
    lib: (await import(pathToFileURL(`${dist}/index.js`).href)) as Shared,
    redisLib: (await import(pathToFileURL(`${dist}/redis.js`).href)) as SharedRedis,
  });
}

const ruleInput: RuleInput = {
  name: 'bench-admit',
  match: { path: '/ok/**' },
  limit: { capacity: 1e9, refill: 1e9, period: '1s' },
};
// three limits of one rule decided together (bench/gateway.ts's stacked rule, keyed by IP here)
const stackedInput: RuleInput = {
  name: 'bench-stacked',
  match: { path: '/stacked/**' },
  limits: [
    { name: 'burst', capacity: 1e9, refill: 1e9, period: '1s' },
    { name: 'daily', algorithm: 'sliding-window', max: 1e12, window: '1d' },
    { name: 'everyone', client: { by: 'global' }, capacity: 1e9, refill: 1e9, period: '1s' },
  ],
};

// one concurrency slot per client: taken at the decision, given back when the exchange ends (at once
// here: the lifecycle's store work without the upstream)
const slotsInput: RuleInput = {
  name: 'bench-slots',
  match: { path: '/slots/**' },
  limits: [{ name: 'inflight', algorithm: 'concurrency', max: 1000 }],
};

/** One request's facts, one class for all (as the gateway's request context). */
class Facts implements RequestFacts {
  readonly method = 'GET';
  readonly host = undefined;
  constructor(
    readonly path: string,
    readonly ip: string,
  ) {}
  header() {
    return undefined;
  }
  joinedHeader() {
    return undefined;
  }
  clientIp() {
    return this.ip;
  }
  claims() {
    return undefined;
  }
}
const facts = (path: string, clients: number) =>
  Array.from({ length: clients }, (_, i) => new Facts(path, `10.0.${i >> 8}.${i & 255}`));

const stack = new Stack({ tsx: [], profiledTsx: [], gateway: [] });
const redis = await stack.startRedis();

interface Scenario {
  name: string;
  decide: (i: number) => unknown;
  close: () => Promise<void>;
}
const scenarios: Scenario[] = [];
const kinds = [
  { kind: 'in-process store', inProcess: true, input: ruleInput, path: '/ok/item' },
  { kind: 'Redis, batched', inProcess: false, input: ruleInput, path: '/ok/item' },
  {
    kind: 'in-process store, three stacked limits',
    inProcess: true,
    input: stackedInput,
    path: '/stacked/item',
  },
  {
    kind: 'Redis, batched, three stacked limits',
    inProcess: false,
    input: stackedInput,
    path: '/stacked/item',
  },
  {
    kind: 'Redis, batched, concurrency (take + give back)',
    inProcess: false,
    input: slotsInput,
    path: '/slots/item',
  },
  // every request on one key: a batch's takes, and its give-backs, ride in a row
  {
    kind: 'Redis, batched, concurrency, one hot client (take + give back)',
    inProcess: false,
    input: slotsInput,
    path: '/slots/item',
    clients: 1,
  },
] as const;
for (const { label, lib, redisLib } of builds) {
  for (const scenarioKind of kinds) {
    const { kind, inProcess, input, path } = scenarioKind;
    const rule = {
      ...lib.withDefaults(input),
      id: '00000000-0000-4000-8000-000000000001',
      version: 1,
      createdAt: '2026-01-01T00:00:00.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
    } as Rule;
    const requests = facts(path, 'clients' in scenarioKind ? scenarioKind.clients : CLIENTS);
    const primary = inProcess
      ? new lib.MemoryStore({})
      : new redisLib.RedisStore(redis.url, {
          keyPrefix: `${label === 'baseline' ? 'b' : 'n'}:`,
          // CPU is measured here, not latency: a warm-up pause on a busy machine must not fail the store open
          commandTimeoutMs: 2_000,
        });
    if (primary instanceof redisLib.RedisStore) await primary.ready();
    const store = new lib.GuardedStore({
      primary,
      policy: 'open',
      local: inProcess ? primary : undefined,
      log: { info() {}, error() {} },
    });
    const core = new lib.DecisionCore({ store });
    core.setRules(lib.compileRules([rule]));
    if (ONLY && !kind.includes(ONLY)) {
      await primary.close();
      continue;
    }
    scenarios.push({
      name: `${kind}\t${label}`,
      decide: (i) => core.decide(requests[i % requests.length]!),
      close: () => primary.close(),
    });
  }
}

async function drive(scenario: Scenario, decisions: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < decisions) {
      const decision = (await scenario.decide(next++)) as {
        kind: string;
        allowed?: boolean;
        exchange?: { end(): void };
      };
      if (decision.kind !== 'limited' || decision.allowed !== true)
        throw new Error(`not admitted: ${decision.kind}`);
      decision.exchange?.end();
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}

const session = new Session();
session.connect();
/** Bytes allocated while `run` runs, collected or not (sampled every 1 KB). */
async function allocatedBytes(run: () => Promise<void>): Promise<number> {
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  } as never);
  await run();
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as {
    profile: { head: SampledNode };
  };
  let total = 0;
  const walk = (node: SampledNode) => {
    total += node.selfSize;
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  return total;
}
interface SampledNode {
  selfSize: number;
  children: SampledNode[];
}

// Young-generation collection time: a gateway whose dead objects stay reachable from old space pays
// it on every scavenge (docs/benchmarks.md, the batching channel's Map churn), which CPU per decision
// shows only as noise
let scavengeMs = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const { detail } = entry as { detail?: { kind?: number } };
    if (detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) {
      scavengeMs += entry.duration;
    }
  }
}).observe({ entryTypes: ['gc'] });
/** Lets the observer's entries of what just ran arrive (they are delivered on a later turn). */
const gcEntriesIn = () => new Promise((resolve) => setTimeout(resolve, 0));

const samples = new Map<string, { us: number; bytes: number; scavengeUs: number }[]>();
for (const scenario of scenarios) await drive(scenario, 20_000); // warm-up
for (let round = 0; round < ROUNDS; round++) {
  for (const scenario of scenarios) {
    await gcEntriesIn();
    const scavengedBefore = scavengeMs;
    const before = process.cpuUsage();
    await drive(scenario, DECISIONS);
    const used = process.cpuUsage(before);
    await gcEntriesIn();
    const scavengeUs = ((scavengeMs - scavengedBefore) * 1000) / DECISIONS;
    const bytes = await allocatedBytes(() => drive(scenario, DECISIONS / 4));
    const list = samples.get(scenario.name) ?? [];
    list.push({ us: (used.user + used.system) / DECISIONS, bytes: bytes / (DECISIONS / 4), scavengeUs });
    samples.set(scenario.name, list);
  }
}
const redisCpuMs = cpuMs(redis.child.pid);
for (const scenario of scenarios) await scenario.close();
await stack.stop();

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  `${DECISIONS} decisions per scenario and round (${CONCURRENCY} in flight, ${CLIENTS} clients), ${ROUNDS} rounds, medians; this process's CPU (Redis's own: ${redisCpuMs} ms in all)\n`,
);
console.log('| store | build | CPU µs / decision | bytes allocated / decision | scavenge µs / decision |');
console.log('| --- | --- | ---: | ---: | ---: |');
for (const [name, list] of samples) {
  const [store, label] = name.split('\t');
  console.log(
    `| ${store} | ${label} | ${median(list.map((s) => s.us)).toFixed(2)} | ${median(list.map((s) => s.bytes)).toFixed(0)} | ${median(list.map((s) => s.scavengeUs)).toFixed(2)} |`,
  );
}
process.exit(0);
