/**
 * Rule matcher throughput: lookups/second with 10 and with 10,000 rules, same requests.
 * Run: node --conditions=sluice-source --import tsx bench/matcher.ts   (about 15 s, CPU only)
 *
 * The point is the ratio: lookup cost should follow path depth, not rule count.
 */
import { compileRules, type MatchRequest } from '../packages/shared/src/rules/match.js';
import type { HttpMethod, Rule } from '../packages/shared/src/rules/schema.js';

const ROUNDS = 7;
const ROUND_MS = 600;
const WARMUP_MS = 1_500;

/** Deterministic PRNG (mulberry32) so every run measures the same rule sets. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HOSTS = ['api.example.com', 'admin.example.com', 'eu.example.com', 'partners.example.com'];
const RESOURCES = ['orders', 'users', 'items', 'carts', 'payments', 'search', 'reports', 'files'];
const METHOD_SETS: Array<HttpMethod[] | undefined> = [
  undefined,
  undefined,
  ['GET', 'HEAD'],
  ['POST'],
  ['PUT', 'PATCH', 'DELETE'],
];

function makeRule(i: number, path: string, extra: Partial<Rule['match']> = {}, priority = 0): Rule {
  return {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    name: `r${i}`,
    match: { path, ...extra },
    client: { by: 'ip' },
    limit: { capacity: 100, refill: 100, period: '1m' },
    cost: 1,
    maxDebt: 100,
    enabled: true,
    shadow: false,
    priority,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
}

/** A gateway-sized rule set: per-service globs, a few exact and `*` paths, some per host. */
function smallRuleSet(): Rule[] {
  return [
    makeRule(0, '/health'),
    makeRule(1, '/orders/**'),
    makeRule(2, '/orders/*', { methods: ['POST'] }),
    makeRule(3, '/users/*/profile', { methods: ['GET', 'HEAD'] }),
    makeRule(4, '/search'),
    makeRule(5, '/admin/**', { host: 'admin.example.com' }, 5),
    makeRule(6, '/v1/*/items/**'),
    makeRule(7, '/login', { methods: ['POST'] }, 10),
    makeRule(8, '/files/**', { host: 'api.example.com' }),
    makeRule(9, '/svc3/v2/orders/*'),
  ];
}

/** 10,000 rules over 400 services: depths 1–5, `*` in the middle and at the end, `**`, methods, hosts. */
function largeRuleSet(count: number): Rule[] {
  const rand = prng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const rules = smallRuleSet();
  for (let i = rules.length; i < count; i++) {
    const svc = `svc${Math.floor(rand() * 400)}`;
    const version = `v${1 + Math.floor(rand() * 3)}`;
    const resource = pick(RESOURCES);
    const shape = rand();
    let path: string;
    if (shape < 0.25) path = `/${svc}/${version}/${resource}/**`;
    else if (shape < 0.45) path = `/${svc}/${version}/${resource}/*`;
    else if (shape < 0.6) path = `/${svc}/*/${resource}/*/items`;
    else if (shape < 0.75) path = `/${svc}/${version}/${resource}/${Math.floor(rand() * 1000)}`;
    else if (shape < 0.85) path = `/${svc}/**`;
    else if (shape < 0.95) path = `/${svc}/${version}/*/search`;
    else path = `/*/${version}/${resource}/${i}/**`;
    const match: Partial<Rule['match']> = {};
    const methods = pick(METHOD_SETS);
    if (methods) match.methods = methods;
    if (rand() < 0.15) match.host = pick(HOSTS);
    rules.push(makeRule(i, path, match, Math.floor(rand() * 3) - 1));
  }
  return rules;
}

/**
 * The same 64 requests for both sets, drawn from the small set's patterns (`*` and `**` filled in
 * with random segments), with a few misses: every lookup walks the trie to a real depth in both sets,
 * so the comparison isolates the cost of the 9,990 extra rules.
 */
function requests(): MatchRequest[] {
  const rand = prng(7);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const filler = () => pick(['7', '42', 'abc', 'x', 'items', 'v1', 'orders']);
  const out: MatchRequest[] = [
    { method: 'GET', host: 'api.example.com', path: '/nothing/here/at/all' },
    { method: 'GET', host: 'other.example.org', path: '/' },
  ];
  const small = smallRuleSet();
  while (out.length < 64) {
    const rule = pick(small);
    const segments: string[] = [];
    for (const seg of rule.match.path.split('/').slice(1)) {
      if (seg === '*') segments.push(filler());
      else if (seg === '**') for (let n = Math.floor(rand() * 4); n > 0; n--) segments.push(filler());
      else segments.push(seg);
    }
    out.push({
      method: pick(rule.match.methods ?? ['GET', 'POST', 'DELETE']),
      host: rule.match.host ?? pick([...HOSTS, undefined]),
      path: `/${segments.join('/')}`,
    });
  }
  return out;
}

// Keeps the JIT from dropping lookups whose result is unused.
let sink = 0;

/** Lookups per second over at least `ms` milliseconds. */
function measure(match: (r: MatchRequest) => unknown, reqs: MatchRequest[], ms: number): number {
  let lookups = 0;
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(ms) * 1_000_000n;
  let now = start;
  while (now < deadline) {
    for (let rep = 0; rep < 50; rep++) {
      for (let i = 0; i < reqs.length; i++) if (match(reqs[i]!) !== undefined) sink++;
    }
    lookups += 50 * reqs.length;
    now = process.hrtime.bigint();
  }
  return lookups / (Number(now - start) / 1e9);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

const reqs = requests();
const sets = [
  { label: '10 rules', rules: smallRuleSet() },
  { label: '10,000 rules', rules: largeRuleSet(10_000) },
].map(({ label, rules }) => {
  const t0 = process.hrtime.bigint();
  const set = compileRules(rules);
  const compileMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const hits = reqs.filter((r) => set.match(r) !== undefined).length;
  return { label, set, compileMs, hits, samples: [] as number[] };
});

for (const s of sets) measure(s.set.match, reqs, WARMUP_MS / sets.length);
for (let round = 0; round < ROUNDS; round++) {
  for (const s of sets) s.samples.push(measure(s.set.match, reqs, ROUND_MS));
}

console.log(`Rule matcher, ${reqs.length} requests, ${ROUNDS} interleaved rounds of ${ROUND_MS} ms, median`);
console.log(`Node ${process.version}\n`);
console.log('| rule set | compile (ms) | requests matched | lookups/s (median) | min | max |');
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
for (const s of sets) {
  console.log(
    `| ${s.label} | ${s.compileMs.toFixed(1)} | ${s.hits}/${reqs.length} | ${fmt(median(s.samples))} | ${fmt(Math.min(...s.samples))} | ${fmt(Math.max(...s.samples))} |`,
  );
}
const ratio = median(sets[1]!.samples) / median(sets[0]!.samples);
console.log(`\nratio (10k / 10): ${ratio.toFixed(2)}  (1.00 = lookup cost independent of rule count)`);
if (sink < 0) console.log(sink);
