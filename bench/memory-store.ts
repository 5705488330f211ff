// The in-process store (the embedded default and the STORE_FAILURE=local fallback), in process, CPU
// µs per decision: one key decided over and over, its state still alive between decisions (a busy
// client) or expired each time (a client slower than its bucket refills, or a global limit on a quiet
// route). A lone key whose state expires was the pathological case: lru-cache empties its whole
// `maxKeys`-long arrays when its last entry is deleted (memory-store.ts).
//
// BENCH_MEMORY_DECISIONS (50000) per scenario; BENCH_BASELINE_SHARED=<another checkout>/packages/shared/dist
// adds that build's MemoryStore to the same run.
import { pathToFileURL } from 'node:url';
import { MemoryStore } from '../packages/shared/src/limiter/memory-store.js';

const DECISIONS = Number(process.env.BENCH_MEMORY_DECISIONS ?? 50_000);
const spec = { algorithm: 'token-bucket', capacity: 1e9, refill: 1e9, periodMs: 1000, maxDebt: 0 } as const;

const builds: { label: string; Store: typeof MemoryStore }[] = [{ label: 'this build', Store: MemoryStore }];
if (process.env.BENCH_BASELINE_SHARED) {
  const url = pathToFileURL(`${process.env.BENCH_BASELINE_SHARED}/limiter/memory-store.js`).href;
  builds.push({
    label: 'baseline',
    Store: ((await import(url)) as { MemoryStore: typeof MemoryStore }).MemoryStore,
  });
}

console.log(`${DECISIONS} decisions per scenario, one key, the store's clock walked by the step\n`);
console.log('| one key, its state between decisions | build | CPU µs / decision |');
console.log('| --- | --- | ---: |');
for (const [scenario, stepMs] of [
  ['alive (0.01 ms apart)', 0.01],
  ['expired (2 ms apart: full again)', 2],
] as const) {
  for (const { label, Store } of builds) {
    let nowMs = 0;
    const store = new Store({ now: () => nowMs, sweepIntervalMs: 0 });
    const decide = () => {
      nowMs += stepMs;
      store.acquireSync([{ key: 'bench', spec, cost: 1 }]);
    };
    for (let i = 0; i < 2_000; i++) decide(); // warm-up
    const before = process.cpuUsage();
    for (let i = 0; i < DECISIONS; i++) decide();
    const used = process.cpuUsage(before);
    console.log(`| ${scenario} | ${label} | ${((used.user + used.system) / DECISIONS).toFixed(2)} |`);
    await store.close();
  }
}
