/**
 * The in-process limiter store: the same engine and arithmetic as Redis (engine.ts and the algorithm
 * models are the Lua script's twins), one process only. Memory is bounded twice: at most `maxKeys`
 * limit states (least recently used go first), and a state is dropped once it no longer matters (a
 * bucket full again, a window whose estimate is 0), on access or by a periodic sweep, so idle
 * clients cost nothing.
 */
import { LRUCache } from 'lru-cache';
import { MAX_WAIT_MS } from './algorithms/wait.js';
import { acquireFrom, type StateTable, settleFrom } from './engine.js';
import type { LimitCheck, LimitOutcome, SettledLimit, Settlement, StoreDecision } from './limits.js';
import { peekOutcomes } from './peek.js';
import type { Store } from './store.js';

export interface MemoryStoreOptions {
  /** most limit states kept (one per limit per client); the least recently used is evicted beyond it; default 100,000 */
  maxKeys?: number;
  /** the store's clock in ms; default `performance.timeOrigin + performance.now()` (monotonic) */
  now?: () => number;
  /** how often states that no longer matter are swept, in ms; 0 = never (they still go on access or eviction); default 60,000 */
  sweepIntervalMs?: number;
  /**
   * A floor on every written state's time to live, ms on the store's clock; default 0. A simulation
   * that compares this store with Redis under the same floor (`RedisStore`'s `minTtlMs`) sets it.
   */
  minTtlMs?: number;
}

export const DEFAULT_MAX_KEYS = 100_000;

/** A state plus the moment from which it no longer matters (as good as absent). */
interface Entry {
  readonly state: unknown;
  /** the store's clock (ms) from which the state is as good as absent */
  readonly expiresAtMs: number;
}

/** A state dropped while it was the store's only one (see `#table`): absent, and not counted. */
const DROPPED: Entry = Object.freeze({ state: undefined, expiresAtMs: -Infinity });

function monotonicNowMs(): number {
  return performance.timeOrigin + performance.now();
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;
  readonly #now: () => number;
  readonly #minTtlMs: number;
  // Expiry is kept here rather than with lru-cache's TTL: it must run on the store's clock and
  // never fire before the state stops mattering (lru-cache reads its own clock, and skips TTLs that
  // start at 0), and an expired state found before it is swept decides exactly like a missing one.
  readonly #entries: LRUCache<string, Entry>;
  readonly #sweepTimer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    this.#now = options.now ?? monotonicNowMs;
    this.#minTtlMs = options.minTtlMs ?? 0;
    this.#entries = new LRUCache<string, Entry>({ max: options.maxKeys ?? DEFAULT_MAX_KEYS });
    const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
    if (sweepIntervalMs > 0) {
      this.#sweepTimer = setInterval(() => this.sweep(), sweepIntervalMs);
      this.#sweepTimer.unref();
    }
  }

  /** States held now (expired ones count until swept or touched). */
  get size(): number {
    const entries = this.#entries;
    if (entries.size !== 1) return entries.size;
    for (const entry of entries.values()) return entry === DROPPED ? 0 : 1;
    return 0;
  }

  /** Drops every state that no longer matters by now; returns how many were dropped. */
  sweep(): number {
    const nowMs = this.#now();
    const expired: string[] = [];
    let dropped = 0; // already gone: not counted again
    for (const [key, entry] of this.#entries.entries()) {
      if (nowMs >= entry.expiresAtMs) expired.push(key);
      if (entry === DROPPED) dropped++;
    }
    for (const key of expired) this.#entries.delete(key);
    return expired.length - dropped;
  }

  /**
   * The states held under `keys` (undefined when none or no longer mattering) and the store's clock,
   * for reading limits without charging (peek.ts). Changes nothing, not even recency.
   */
  peekStates(keys: readonly string[], nowMs = this.#now()): { states: unknown[]; nowMs: number } {
    const states = keys.map((key) => {
      const entry = this.#entries.peek(key);
      return entry !== undefined && nowMs < entry.expiresAtMs ? entry.state : undefined;
    });
    return { states, nowMs };
  }

  async peek(checks: readonly LimitCheck[]): Promise<LimitOutcome[]> {
    const { states, nowMs } = this.peekStates(checks.map((check) => check.key));
    return peekOutcomes(checks, states, nowMs);
  }

  async acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    return this.acquireSync(checks);
  }

  /** The same decision without the promise, for callers that want to avoid a microtask. */
  acquireSync(checks: readonly LimitCheck[]): StoreDecision {
    const nowMs = this.#now();
    return acquireFrom(this.#table(nowMs), checks, nowMs);
  }

  async settle(settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    const nowMs = this.#now();
    return settleFrom(this.#table(nowMs), settlements, nowMs);
  }

  async close(): Promise<void> {
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    this.#entries.clear();
  }

  /** The entries as the engine sees them at `nowMs`. */
  #table(nowMs: number): StateTable {
    const entries = this.#entries;
    const minTtlMs = this.#minTtlMs;
    // lru-cache empties every one of its `maxKeys`-long arrays when its last entry is deleted: a store
    // holding one key (a global limit, a lone client slower than its bucket refills) paid that
    // O(maxKeys) on each decision (bench/memory-store.ts: 165 µs instead of 2 at the default
    // 100,000). The last entry is marked DROPPED instead, for the next write or the sweep to replace.
    const forget = (key: string) => {
      if (entries.size === 1) {
        if (entries.peek(key) !== undefined) entries.set(key, DROPPED);
      } else entries.delete(key);
    };
    return {
      get(key) {
        const entry = entries.get(key);
        if (entry === undefined) return undefined;
        if (nowMs < entry.expiresAtMs) return entry.state;
        forget(key); // no longer matters, whatever this decision is
        return undefined;
      },
      set(key, state, ttlMs) {
        if (ttlMs === 0) forget(key);
        else {
          // a wait of MAX_WAIT_MS means "at least": such a state never expires early
          const expiresAtMs = ttlMs >= MAX_WAIT_MS ? Infinity : nowMs + Math.max(ttlMs, minTtlMs);
          entries.set(key, { state, expiresAtMs });
        }
      },
    };
  }
}
