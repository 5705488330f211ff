/**
 * The circuit breaker and the failure policies, over a scripted store (a `Store` whose answers the
 * test decides) and the real in-process store. Real Redis failures are in test/store-failure.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { LimitCheck, SettledLimit, StoreDecision } from '../limiter/limits.js';
import { MemoryStore } from '../limiter/memory-store.js';
import { type Store, StoreError } from '../limiter/store.js';
import {
  type BreakerStateValue,
  FAILURES_TO_OPEN,
  GuardedStore,
  type PolicyAnswer,
  type StorePolicyMetrics,
} from './store-policy.js';

const ADMIT: StoreDecision = {
  allowed: true,
  limits: [{ allowed: true, level: 5, remaining: 5, retryAfterMs: 0, resetMs: 100 }],
  deniedIndex: -1,
  retryAfterMs: 0,
};
const REQUEST: LimitCheck[] = [
  {
    key: '{rule:ip:1}',
    spec: { algorithm: 'token-bucket', capacity: 2, refill: 1, periodMs: 1000, maxDebt: 2 },
    cost: 1,
  },
];

/** A store that fails while `failing` is set, and counts the calls that reached it. */
class ScriptedStore implements Store {
  readonly kind = 'redis' as const;
  failing = false;
  calls = 0;
  async acquire(): Promise<StoreDecision> {
    this.calls++;
    if (this.failing) throw new StoreError('STORE_UNAVAILABLE', 'down');
    return ADMIT;
  }
  settled = 0;
  async settle(): Promise<SettledLimit[]> {
    this.settled++;
    return [];
  }
  async close(): Promise<void> {}
}

/** A store of two failure domains (Cluster nodes), named by the key's first letter; `dead` ones fail. */
class TwoNodeStore extends ScriptedStore {
  readonly dead = new Set<string>();
  domainOf(checks: readonly LimitCheck[]): string {
    return checks[0]!.key.slice(0, 1);
  }
  override async acquire(checks?: readonly LimitCheck[]): Promise<StoreDecision> {
    this.calls++;
    if (this.dead.has(this.domainOf(checks!))) throw new StoreError('STORE_UNAVAILABLE', 'node down');
    return ADMIT;
  }
}

function recordingLogger() {
  const lines: string[] = [];
  const log = {
    info: (_o: unknown, msg?: string) => lines.push(`info ${msg}`),
    error: (_o: unknown, msg?: string) => lines.push(`error ${msg}`),
  };
  return { log, lines };
}

/** What the policy reported, as counts. */
function recordingMetrics() {
  const counts = { errors: { timeout: 0, error: 0 }, fallbacks: 0, breaker: 0 as BreakerStateValue };
  const metrics: StorePolicyMetrics = {
    decisionSeconds() {},
    fallback: () => counts.fallbacks++,
    storeError: (kind) => counts.errors[kind]++,
    storeCall() {},
    breakerState: (value) => {
      counts.breaker = value;
    },
  };
  return { metrics, counts };
}

const STORE: PolicyAnswer = { kind: 'store', decision: ADMIT };
const OPEN: PolicyAnswer = { kind: 'open' };
const UNAVAILABLE: PolicyAnswer = { kind: 'unavailable' };

/** A clock the test moves by hand: the breaker's cool-downs pass without sleeping. */
function fakeClock(startMs = 1_000) {
  let nowMs = startMs;
  return {
    now: () => nowMs,
    advance: (ms: number) => {
      nowMs += ms;
    },
  };
}

function guarded(policy: 'local' | 'open' | 'closed', coolDownMs = 50) {
  const primary = new ScriptedStore();
  const { metrics, counts } = recordingMetrics();
  const { log, lines } = recordingLogger();
  const clock = fakeClock();
  const store = new GuardedStore({
    primary,
    policy,
    local: policy === 'local' ? new MemoryStore() : undefined,
    metrics,
    log,
    coolDownMs,
    now: clock.now,
  });
  return { primary, store, counts, lines, clock };
}

describe('GuardedStore', () => {
  it('keeps one breaker per failure domain: a dead node opens its own, the others stay on the store', async () => {
    const primary = new TwoNodeStore();
    const store = new GuardedStore({
      primary,
      policy: 'open',
      local: undefined,
      log: recordingLogger().log,
      coolDownMs: 1_000,
      now: fakeClock().now,
    });
    const on = (node: string): LimitCheck[] => [{ ...REQUEST[0]!, key: `${node}{rule:ip:1}` }];
    primary.dead.add('a');
    for (let i = 0; i < FAILURES_TO_OPEN + 5; i++) expect(await store.acquire(on('a'))).toEqual(OPEN);
    expect(store.breakerStateOf('a')).toBe('open');
    expect(store.breakerState).toBe('open'); // the metric shows the worst
    const callsBefore = primary.calls;
    for (let i = 0; i < 10; i++) expect(await store.acquire(on('b'))).toEqual(STORE);
    expect(primary.calls).toBe(callsBefore + 10);
    expect(store.breakerStateOf('b')).toBe('closed');
  });

  it('passes decisions through while the store answers', async () => {
    const { store, primary } = guarded('local');
    expect(await store.acquire(REQUEST)).toEqual(STORE);
    expect(primary.calls).toBe(1);
    expect(store.breakerState).toBe('closed');
  });

  it(`opens after ${FAILURES_TO_OPEN} failures, stops asking, probes once after the cool-down, closes on success`, async () => {
    const { store, primary, counts, lines, clock } = guarded('local', 100);
    primary.failing = true;
    for (let i = 0; i < FAILURES_TO_OPEN; i++) {
      const answer = await store.acquire(REQUEST);
      // the local bucket (capacity 2) decides
      expect(answer.kind === 'fallback' && answer.decision.allowed).toBe(i < 2);
    }
    expect(store.breakerState).toBe('open');
    const callsWhenOpened = primary.calls;
    for (let i = 0; i < 20; i++) await store.acquire(REQUEST);
    expect(primary.calls).toBe(callsWhenOpened);

    clock.advance(99);
    await store.acquire(REQUEST);
    expect(primary.calls).toBe(callsWhenOpened); // not yet: the cool-down is 100 ms
    clock.advance(1);
    // the probe fails: open again for another cool-down, still without asking on every request
    await store.acquire(REQUEST);
    expect(primary.calls).toBe(callsWhenOpened + 1);
    await store.acquire(REQUEST);
    expect(primary.calls).toBe(callsWhenOpened + 1);
    expect(store.breakerState).toBe('open');

    primary.failing = false;
    clock.advance(100);
    expect(await store.acquire(REQUEST)).toEqual(STORE);
    expect(store.breakerState).toBe('closed');
    expect(await store.acquire(REQUEST)).toEqual(STORE);
    expect(primary.calls).toBe(callsWhenOpened + 3);

    // one line when it opened, one when it closed: not one per request
    expect(lines.filter((l) => l.startsWith('error'))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith('info'))).toHaveLength(1);
    expect(counts.errors.error).toBe(FAILURES_TO_OPEN + 1);
    expect(counts.breaker).toBe(0);
  });

  it('lets one probe through at a time', async () => {
    const { store, primary, clock } = guarded('open', 10);
    primary.failing = true;
    for (let i = 0; i < FAILURES_TO_OPEN; i++) await store.acquire(REQUEST);
    clock.advance(10);
    primary.failing = false;
    const before = primary.calls;
    const answers = await Promise.all([
      store.acquire(REQUEST),
      store.acquire(REQUEST),
      store.acquire(REQUEST),
    ]);
    expect(primary.calls).toBe(before + 1);
    expect(answers).toEqual([STORE, OPEN, OPEN]);
  });

  it('open admits without a decision, closed refuses', async () => {
    const open = guarded('open');
    open.primary.failing = true;
    expect(await open.store.acquire(REQUEST)).toEqual(OPEN);
    const closed = guarded('closed');
    closed.primary.failing = true;
    expect(await closed.store.acquire(REQUEST)).toEqual(UNAVAILABLE);
    expect(closed.counts.fallbacks).toBe(1);
  });

  it("tells fallback decisions from the store's (the denial cache keeps only the store's)", async () => {
    const { store, primary } = guarded('local');
    expect((await store.acquire(REQUEST)).kind).toBe('store');
    primary.failing = true;
    const fromLocal = await store.acquire(REQUEST);
    expect(fromLocal.kind).toBe('fallback');
    // a settlement of a fallback admission goes to the local store, never to the failing primary
    const settled = primary.settled;
    await store.settle('fallback', [
      { key: REQUEST[0]!.key, spec: REQUEST[0]!.spec, delta: -1, admittedAtMs: 0 },
    ]);
    expect(primary.settled).toBe(settled);
  });

  it('counts timeouts apart from other errors', async () => {
    const { store, primary, counts } = guarded('open');
    primary.acquire = async () => {
      throw new StoreError('STORE_TIMEOUT', 'slow');
    };
    await store.acquire(REQUEST);
    expect(counts.errors).toEqual({ timeout: 1, error: 0 });
  });

  it('local: each gateway holds a fair share of the limit while the store is away; a lone one the whole', async () => {
    const bucket: LimitCheck[] = [
      {
        key: '{r:ip:1}',
        spec: { algorithm: 'token-bucket', capacity: 30, refill: 1, periodMs: 3_600_000, maxDebt: 0 },
        cost: 1,
      },
    ];
    const admittedBy = async (gateways: number) => {
      const primary = new ScriptedStore();
      primary.failing = true;
      const store = new GuardedStore({
        primary,
        policy: 'local',
        local: new MemoryStore(),
        log: recordingLogger().log,
        now: fakeClock().now,
        gateways: () => gateways,
      });
      let admitted = 0;
      for (let i = 0; i < 40; i++) {
        const answer = await store.acquire(bucket);
        if (answer.kind === 'fallback' && answer.decision.allowed) admitted++;
      }
      return admitted;
    };
    expect(await admittedBy(1)).toBe(30);
    expect(await admittedBy(3)).toBe(10);
    // three gateways together: about the limit, not three times it
    expect(3 * (await admittedBy(3))).toBe(30);
  });

  it('local: a refund of a fallback admission fills its share, never the whole bucket', async () => {
    const spec = {
      algorithm: 'token-bucket',
      capacity: 30,
      refill: 1,
      periodMs: 3_600_000,
      maxDebt: 0,
    } as const;
    const primary = new ScriptedStore();
    primary.failing = true;
    const store = new GuardedStore({
      primary,
      policy: 'local',
      local: new MemoryStore(),
      log: recordingLogger().log,
      now: fakeClock().now,
      gateways: () => 3,
    });
    const check: LimitCheck[] = [{ key: '{r:ip:2}', spec, cost: 1 }];
    const first = await store.acquire(check);
    expect(first.kind === 'fallback' && first.decision.limits[0]!.remaining).toBe(9);
    const settled = await store.settle('fallback', [{ key: '{r:ip:2}', spec, delta: -50, admittedAtMs: 0 }]);
    expect(settled[0]!.remaining).toBe(10);
  });
});
