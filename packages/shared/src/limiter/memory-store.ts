/**
 * The in-process bucket store: the same arithmetic as Redis (bucket.ts), one process only.
 * Memory is bounded twice: at most `maxBuckets` buckets (least recently used go first), and a
 * bucket is dropped once it would be full again (on access, or by a periodic sweep), so idle
 * clients cost nothing.
 */
import { LRUCache } from 'lru-cache';
import { type BucketState, decide, MAX_WAIT_MS } from './bucket.js';
import type { Decision, DecisionRequest, Store } from './store.js';

export interface MemoryStoreOptions {
  /** most buckets kept; the least recently used is evicted beyond it; default 100,000 */
  maxBuckets?: number;
  /** the store's clock in ms; default `performance.timeOrigin + performance.now()` (monotonic) */
  now?: () => number;
  /** how often full buckets are swept, in ms; 0 = never (they still go on access or eviction); default 60,000 */
  sweepIntervalMs?: number;
}

export const DEFAULT_MAX_BUCKETS = 100_000;

/** A bucket plus the moment it is full again, after which it is as good as absent. */
interface Entry extends BucketState {
  /** the store's clock (ms) from which the bucket is full: `decision time + fullInMs` */
  fullAtMs: number;
}

function monotonicNowMs(): number {
  return performance.timeOrigin + performance.now();
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;
  readonly #now: () => number;
  // Expiry is kept here rather than with lru-cache's TTL: it must run on the store's clock and
  // never fire before the bucket is full (lru-cache reads its own clock, and skips TTLs that
  // start at 0), and a full bucket found before it is swept decides exactly like a missing one.
  readonly #buckets: LRUCache<string, Entry>;
  readonly #sweepTimer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    this.#now = options.now ?? monotonicNowMs;
    this.#buckets = new LRUCache<string, Entry>({ max: options.maxBuckets ?? DEFAULT_MAX_BUCKETS });
    const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
    if (sweepIntervalMs > 0) {
      this.#sweepTimer = setInterval(() => this.sweep(), sweepIntervalMs);
      this.#sweepTimer.unref();
    }
  }

  /** Buckets held now (full ones count until swept or touched). */
  get size(): number {
    return this.#buckets.size;
  }

  /** Drops every bucket that is full by now; returns how many were dropped. */
  sweep(): number {
    const nowMs = this.#now();
    const full: string[] = [];
    for (const [key, entry] of this.#buckets.entries()) if (nowMs >= entry.fullAtMs) full.push(key);
    for (const key of full) this.#buckets.delete(key);
    return full.length;
  }

  async decide(request: DecisionRequest): Promise<Decision> {
    return this.decideSync(request);
  }

  /** The same decision without the promise, for callers that want to avoid a microtask. */
  decideSync(request: DecisionRequest): Decision {
    const nowMs = this.#now();
    const entry = this.#buckets.get(request.key);
    const current = entry && nowMs < entry.fullAtMs ? entry : undefined;
    const { decision, state, changed } = decide(current, request.limits, request.cost, nowMs);
    if (changed) {
      if (decision.fullInMs === 0) this.#buckets.delete(request.key);
      else {
        // a wait of MAX_WAIT_MS means "at least": such a bucket never expires early
        const fullAtMs = decision.fullInMs >= MAX_WAIT_MS ? Infinity : nowMs + decision.fullInMs;
        this.#buckets.set(request.key, { ...state, fullAtMs });
      }
    } else if (entry && !current) {
      this.#buckets.delete(request.key); // full, and this denial changes nothing
    }
    return decision;
  }

  async close(): Promise<void> {
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    this.#buckets.clear();
  }
}
