/**
 * The decision core with no service running: the in-process store on an injected clock, rules given
 * in code, a scripted store where a store must fail. Each test is one way a request can come out of
 * the limiter (decision.ts), as a gateway, explain or any other front door would see it.
 */

import { describe, expect, it } from 'vitest';
import { SecretClientKeys } from '../identity/secret-keys.js';
import type { LimitCheck, SettledLimit, Settlement, StoreDecision } from '../limiter/limits.js';
import { MemoryStore } from '../limiter/memory-store.js';
import { type Store, StoreError } from '../limiter/store.js';
import { compileRules } from '../rules/match.js';
import type { Rule, RuleInput } from '../rules/schema.js';
import { storedRule } from '../rules/stored-rule.js';
import { DecisionCore, PREVIEW } from './core.js';
import type { Decision, LimitedDecision } from './decision.js';
import { DenialCache } from './denial-cache.js';
import { type DenialEvent, LimiterEvents, type SettlementEvent } from './events.js';
import { joinedHeaderValue, type RequestFacts } from './facts.js';
import { LeaseManager } from './lease-manager.js';
import type { Counter, DecisionMeter, RuleCounters } from './rule-plan.js';
import { GuardedStore, type StoreFailurePolicy } from './store-policy.js';

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;

interface FactsInput {
  method?: string;
  path?: string;
  host?: string;
  headers?: Record<string, string | string[]>;
  ip?: string;
}

/** A request's facts as a front door would give them (headers by lowercase name). */
function facts({ method = 'GET', path = '/api/x', host, headers = {}, ip = '203.0.113.7' }: FactsInput = {}) {
  const lines = new Map(
    Object.entries(headers).map(([name, value]) => [
      name.toLowerCase(),
      typeof value === 'string' ? [value] : value,
    ]),
  );
  const request: RequestFacts = {
    method,
    path,
    host,
    header: (name) => lines.get(name),
    joinedHeader: (name) => joinedHeaderValue(name, lines.get(name)),
    clientIp: () => ip,
  };
  return request;
}

/** A monotonic clock the test moves; the in-process store reads the same one (its "Redis TIME"). */
function clock(startMs = 1_000_000) {
  let nowMs = startMs;
  return {
    now: () => nowMs,
    advance(ms: number) {
      nowMs += ms;
    },
  };
}

/** Counts per rule and decision, as the gateway's metrics would. */
function countingMeter() {
  const counts = new Map<string, number>();
  const counter = (name: string): Counter => ({ inc: () => counts.set(name, (counts.get(name) ?? 0) + 1) });
  const meter: DecisionMeter = {
    requests: (ruleName): RuleCounters => ({
      allowed: counter(`${ruleName}:allowed`),
      denied: counter(`${ruleName}:denied`),
      shadowDenied: counter(`${ruleName}:shadow_denied`),
      unavailable: counter(`${ruleName}:unavailable`),
      unlimited: counter(`${ruleName}:unlimited`),
    }),
    cachedDenials: counter('cached'),
  };
  return { meter, count: (name: string) => counts.get(name) ?? 0 };
}

/** The primary store, with its calls counted; `failing` makes it fail like a Redis that went away. */
class CountingStore implements Store {
  readonly kind = 'redis' as const;
  acquires = 0;
  settlements: Settlement[][] = [];
  failing = false;
  constructor(readonly inner: MemoryStore) {}
  async acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    this.acquires++;
    if (this.failing) throw new StoreError('STORE_UNAVAILABLE', 'down');
    return this.inner.acquire(checks);
  }
  async settle(settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    this.settlements.push([...settlements]);
    if (this.failing) throw new StoreError('STORE_UNAVAILABLE', 'down');
    return this.inner.settle(settlements);
  }
  async close(): Promise<void> {}
}

interface SetupOptions {
  policy?: StoreFailurePolicy;
  leases?: boolean;
  slotLeaseMs?: number;
}

function setup(rules: Rule[], options: SetupOptions = {}) {
  const time = clock();
  const primary = new CountingStore(new MemoryStore({ now: time.now, sweepIntervalMs: 0 }));
  const policy = options.policy ?? 'local';
  const store = new GuardedStore({
    primary,
    policy,
    local: policy === 'local' ? new MemoryStore({ now: time.now, sweepIntervalMs: 0 }) : undefined,
    log: { info() {}, error() {} },
    now: time.now,
  });
  const events = new LimiterEvents();
  const denials: DenialEvent[] = [];
  const settled: SettlementEvent[] = [];
  events.onDenied((event) => denials.push(event));
  events.onSettled((event) => settled.push(event));
  const { meter, count } = countingMeter();
  const core = new DecisionCore({
    store,
    denials: new DenialCache(100),
    leases: options.leases ? new LeaseManager({ store, leaseMs: 100, now: time.now }) : undefined,
    events,
    meter,
    now: time.now,
    slotLeaseMs: options.slotLeaseMs ?? 35_000,
    slotIdPrefix: 'gw-test:',
  });
  core.setRules(compileRules(rules));
  /** decide, awaiting the store when it is asked */
  const decide = async (input: FactsInput = {}): Promise<Decision> => core.decide(facts(input));
  const limited = async (input: FactsInput = {}): Promise<LimitedDecision> => {
    const decision = await decide(input);
    if (decision.kind !== 'limited') throw new Error(`expected a limited decision, got ${decision.kind}`);
    return decision;
  };
  return { core, primary, store, time, denials, settled, count, decide, limited };
}

let perIpRules = 0;
const perIp = (capacity: number, extra: Partial<RuleInput> = {}) =>
  rule({
    name: `per-ip-${++perIpRules}`,
    match: { path: '/api/**' },
    limit: { capacity, refill: 1, period: '1m' },
    ...extra,
  } as RuleInput);

describe('decide: which rule, and whether a limit applies', () => {
  it('is not ready before a rule set, answers no-rule for a path no rule takes', async () => {
    const core = new DecisionCore({
      store: { acquire: async () => ({ kind: 'open' }), settle: async () => [], breakerState: 'closed' },
    });
    expect(core.decide(facts())).toEqual({ kind: 'not-ready' });
    core.setRules(compileRules([perIp(1)]));
    expect(core.decide(facts({ path: '/other' }))).toEqual({ kind: 'no-rule' });
  });

  it('an unlimited rule decides synchronously, without the store, and is counted', async () => {
    const exempt = rule({ name: 'exempt', match: { path: '/api/**' }, unlimited: true, priority: 10 });
    const { core, primary, count } = setup([perIp(1), exempt]);
    const decision = core.decide(facts());
    expect(decision).toMatchObject({ kind: 'unlimited', rule: { name: 'exempt' } });
    expect(primary.acquires).toBe(0);
    expect(count('exempt:unlimited')).toBe(1);
  });
});

describe('decide: admitted and denied', () => {
  it('admits while the bucket has tokens, then denies with the wait, the numbers and the client key', async () => {
    const r = perIp(2);
    const { limited, count, denials } = setup([r]);
    const first = await limited();
    expect(first).toMatchObject({ source: 'store', allowed: true, refused: false, deniedIndex: -1 });
    expect(first.limits[0]).toMatchObject({ remaining: 1 });
    expect(first.clientKeys).toEqual(['ip:203.0.113.7']);
    expect(first.rule.headerItems).toEqual([`"${r.name}"`]);
    await limited();
    const denied = await limited();
    // one token a minute: the next one is a minute away
    expect(denied).toMatchObject({ allowed: false, refused: true, deniedIndex: 0, retryAfterMs: 60_000 });
    expect(count(`${r.name}:allowed`)).toBe(2);
    expect(count(`${r.name}:denied`)).toBe(1);
    expect(denials).toEqual([
      { rule: r.name, ruleId: r.id, limit: '', clientKey: 'ip:203.0.113.7', shadow: false },
    ]);
  });

  it('remembers a store denial: the next ones come from the cache, without a store call, until the wait is over', async () => {
    const { limited, primary, time, count } = setup([perIp(1)]);
    await limited();
    await limited();
    const calls = primary.acquires;
    const cached = await limited();
    expect(cached).toMatchObject({ source: 'cache', allowed: false, refused: true });
    expect(cached.retryAfterMs).toBe(60_000);
    expect(primary.acquires).toBe(calls);
    expect(count('cached')).toBe(1);
    time.advance(60_000);
    expect(await limited()).toMatchObject({ source: 'store', allowed: true });
  });

  it('keys a header limit by the header, a request without it by its IP, a global limit by everyone', async () => {
    const r = rule({
      name: 'keys',
      match: { path: '/api/**' },
      limits: [
        {
          name: 'per-key',
          client: { by: 'header', name: 'X-Api-Key' },
          capacity: 5,
          refill: 1,
          period: '1s',
        },
        { name: 'all', client: { by: 'global' }, capacity: 5, refill: 1, period: '1s' },
      ],
    });
    const { limited } = setup([r]);
    // x-api-key is a credential: keyed by its digest, never in clear (identity/secret-keys.ts)
    const k1 = new SecretClientKeys(undefined).clientKey('k1');
    expect((await limited({ headers: { 'x-api-key': 'k1' } })).clientKeys).toEqual([k1, 'global']);
    expect((await limited()).clientKeys).toEqual(['ip:203.0.113.7', 'global']);
  });

  it('stacked limits are all or nothing: a denial by one charges none of the others', async () => {
    const r = rule({
      name: 'stacked',
      match: { path: '/api/**' },
      limits: [
        { name: 'burst', capacity: 2, refill: 1, period: '1h', maxDebt: 0 },
        { name: 'daily', algorithm: 'sliding-window', max: 100, window: '1d' },
      ],
    });
    const { limited } = setup([r]);
    await limited();
    await limited();
    for (let i = 0; i < 5; i++) {
      const denied = await limited();
      expect(denied.deniedIndex).toBe(0);
    }
    // 2 admitted: the window counted 2, never the 5 denied ones
    const last = await limited();
    expect(last.limits[1]!.remaining).toBe(98);
  });

  it('a shadow rule counts and announces its would-be denials but never refuses', async () => {
    const r = perIp(1, { shadow: true });
    const { limited, count, denials } = setup([r]);
    await limited();
    const wouldDeny = await limited();
    expect(wouldDeny).toMatchObject({ allowed: false, refused: false });
    expect(count(`${r.name}:shadow_denied`)).toBe(1);
    expect(count(`${r.name}:denied`)).toBe(0);
    expect(denials[0]!.shadow).toBe(true);
  });

  it('forgets remembered denials when the rule set changes', async () => {
    const r = perIp(1);
    const { core, limited, time } = setup([r]);
    await limited();
    expect(await limited()).toMatchObject({ source: 'store', allowed: false, retryAfterMs: 60_000 });
    // one token a second now: a second later the store admits, though the old denial ran for a minute
    core.setRules(compileRules([{ ...r, limit: { capacity: 1, refill: 1, period: '1s' } } as Rule]));
    time.advance(1_000);
    expect(await limited()).toMatchObject({ source: 'store', allowed: true });
  });
});

describe('decide: when the store fails (STORE_FAILURE)', () => {
  it('local: the in-process fallback decides, and its denials are not remembered past the outage', async () => {
    const { limited, primary } = setup([perIp(1)], { policy: 'local' });
    primary.failing = true;
    expect(await limited()).toMatchObject({ source: 'fallback', allowed: true });
    expect(await limited()).toMatchObject({ source: 'fallback', allowed: false, refused: true });
    primary.failing = false;
    // the breaker has not opened (2 failures): the store answers again at once
    expect(await limited()).toMatchObject({ source: 'store', allowed: true });
  });

  it('open: admitted without numbers; closed: unavailable with a wait of a second', async () => {
    const open = setup([perIp(1)], { policy: 'open' });
    open.primary.failing = true;
    expect(await open.decide()).toMatchObject({ kind: 'open' });
    const closed = setup([perIp(1)], { policy: 'closed' });
    closed.primary.failing = true;
    const r = await closed.decide();
    expect(r).toMatchObject({ kind: 'unavailable', retryAfterMs: 1000 });
    expect(closed.count(`${(r as { rule: { name: string } }).rule.name}:unavailable`)).toBe(1);
  });
});

describe('decide: lease mode', () => {
  it('admits from a lease without a store call per request, and never more than the bucket holds', async () => {
    const r = perIp(40, { mode: 'lease' });
    const { limited, primary, time } = setup([r], { leases: true });
    let admitted = 0;
    const sources = new Set<string>();
    for (let i = 0; i < 60; i++) {
      // one request a ms: a lease is sized for LEASE_MS (100 ms) of that, at most a quarter of capacity
      time.advance(1);
      const decision = await limited();
      sources.add(decision.source);
      if (decision.allowed) admitted++;
    }
    expect(sources.has('lease')).toBe(true);
    expect(admitted).toBeLessThanOrEqual(40);
    expect(admitted).toBeGreaterThanOrEqual(30);
    expect(primary.acquires).toBeLessThan(60 / 4);
  });
});

describe('settle exactly once', () => {
  const slots = rule({
    name: 'slots',
    match: { path: '/api/**' },
    limits: [
      { name: 'inflight', algorithm: 'concurrency', max: 1 },
      { name: 'rate', capacity: 100, refill: 100, period: '1s' },
    ],
    refund: { statuses: ['5xx'] },
  });

  it('an admitted request holds its slot until its exchange ends, whichever way, once', async () => {
    const { limited, primary, settled } = setup([slots]);
    const first = await limited();
    expect(first.exchange).toBeDefined();
    expect(await limited()).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    first.exchange!.responded(200);
    first.exchange!.end();
    first.exchange!.end();
    first.exchange!.failed(502);
    await new Promise((resolve) => setImmediate(resolve));
    expect(primary.settlements).toHaveLength(1);
    expect(primary.settlements[0]).toEqual([expect.objectContaining({ leaseId: 'gw-test:1', delta: 0 })]);
    expect(settled).toEqual([{ rule: 'slots', kind: 'release', ok: true }]);
    // a concurrency denial is never remembered: the slot is back, the store is asked and admits
    expect(await limited()).toMatchObject({ source: 'store', allowed: true });
  });

  it('a settlement the store fails is told as failed, and each under its own rule', async () => {
    const other = rule({
      name: 'other',
      match: { path: '/other/**' },
      limits: [{ name: 'inflight', algorithm: 'concurrency', max: 1 }],
    });
    const { limited, primary, settled } = setup([slots, other]);
    const first = await limited();
    primary.failing = true;
    first.exchange!.responded(503); // a refund at the response, then the slot given back at the end
    first.exchange!.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(primary.settlements).toHaveLength(2);
    primary.failing = false;
    const second = await limited({ path: '/other/x' });
    second.exchange!.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toEqual([
      { rule: 'slots', kind: 'refund', ok: false },
      { rule: 'slots', kind: 'release', ok: false },
      { rule: 'other', kind: 'release', ok: true },
    ]);
  });

  it('a fallback admission settles on the fallback store, never on the primary that failed', async () => {
    const { limited, primary } = setup([slots]);
    primary.failing = true;
    const admitted = await limited();
    expect(admitted.source).toBe('fallback');
    admitted.exchange!.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(primary.settlements).toHaveLength(0);
  });

  it('a concurrency slot takes the expiry the core was given (UPSTREAM_TIMEOUT_MS + 5 s)', async () => {
    const { limited, time } = setup([slots], { slotLeaseMs: 2_000 });
    await limited();
    time.advance(1_999);
    expect((await limited()).allowed).toBe(false);
    time.advance(1);
    expect((await limited()).allowed).toBe(true);
  });

  it('a running exchange keeps its slot past its lifetime: renewed about every third, once per exchange, until it ends', async () => {
    const { core, limited, time, primary, settled } = setup([slots], { slotLeaseMs: 3_000 });
    const running = await limited();
    time.advance(999);
    expect(core.renewSlots()).toBe(0); // not due before a third of the lifetime
    time.advance(1);
    expect(core.renewSlots()).toBe(1);
    expect(core.renewSlots()).toBe(0); // renewed just now
    time.advance(2_500); // past the first expiry (3 000), within the renewed one (4 000)
    expect((await limited()).allowed).toBe(false);
    await new Promise((resolve) => setImmediate(resolve));
    expect(primary.settlements).toEqual([[expect.objectContaining({ leaseId: 'gw-test:1', renew: true })]]);
    expect(settled).toEqual([{ rule: 'slots', kind: 'renew', ok: true }]);
    running.exchange!.end();
    expect(core.runningSlotExchanges).toBe(0);
    time.advance(5_000);
    expect(core.renewSlots()).toBe(0); // an ended exchange is never renewed
    expect((await limited()).allowed).toBe(true);
  });
});

describe('preview (explain): charges nothing', () => {
  it('names the rule and the client keys, asks no store and changes no counter', async () => {
    const r = perIp(1);
    const { core, primary, limited } = setup([r]);
    for (let i = 0; i < 5; i++) {
      expect(core.decide(facts(), PREVIEW)).toMatchObject({
        kind: 'preview',
        clientKeys: ['ip:203.0.113.7'],
      });
    }
    expect(primary.acquires).toBe(0);
    expect((await limited()).allowed).toBe(true);
  });

  it('a core without a store can only preview', () => {
    const core = new DecisionCore();
    core.setRules(compileRules([perIp(1)]));
    expect(core.decide(facts(), PREVIEW).kind).toBe('preview');
    expect(() => core.decide(facts())).toThrow(/only preview/);
  });
});
