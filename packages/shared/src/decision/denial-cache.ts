/**
 * Denials remembered locally, so a client hammering a denied combination of limits costs no store
 * round trip.
 *
 * Why this is exact, not an approximation, with one limit or several: a denied request changes
 * nothing (all or nothing: no limit is charged when any denies). Other traffic can only charge the
 * same limits, which only lowers a token bucket's balance or raises a window's estimate; without it a
 * bucket only refills at its known rate and an estimate only falls. So no request of this combination
 * can be admitted before the store's `retryAfterMs`, the earliest moment every denying limit admits
 * again with no further traffic, and until then we can answer denials ourselves. The window starts
 * when the request was SENT to the store (not when the answer came back), so our window ends no
 * later than the store's: we may ask the store a little early, never deny a request the store would
 * admit.
 *
 * Entries are keyed by the request's combination of limit keys (`denialKey`). A rule change can
 * change limits under the same keys, so the whole cache is cleared when the rule set changes.
 */
import { LRUCache } from 'lru-cache';
import { carryDenialForward } from '../limiter/algorithms/carry-forward.js';
import type { LimitCheck, LimitSpec, StoreDecision } from '../limiter/limits.js';

interface CachedDenial {
  /** monotonic ms (performance.now) when the deciding request was sent to the store */
  readonly sentAtMs: number;
  /** monotonic ms until which every request of this combination is denied */
  readonly untilMs: number;
  readonly decision: StoreDecision;
  /** the spec of each outcome, to bring token-bucket balances forward by refill */
  readonly specs: readonly LimitSpec[];
}

/** The cache key of a request: its limit keys, in order (a v1 rule's request has one). */
export function denialKey(checks: readonly LimitCheck[]): string {
  if (checks.length === 1) return checks[0]!.key;
  return checks.map((check) => check.key).join('\n');
}

export class DenialCache {
  private readonly entries: LRUCache<string, CachedDenial> | undefined;

  /** `maxEntries` 0 disables the cache. */
  constructor(maxEntries: number) {
    this.entries = maxEntries > 0 ? new LRUCache<string, CachedDenial>({ max: maxEntries }) : undefined;
  }

  get size(): number {
    return this.entries?.size ?? 0;
  }

  /**
   * Remembers a denial the store gave for the request with these `checks`, sent at `sentAtMs`
   * (monotonic ms), under `key` (`denialKey(checks)`).
   */
  remember(key: string, decision: StoreDecision, checks: readonly LimitCheck[], sentAtMs: number): void {
    if (this.entries === undefined || decision.allowed || !(decision.retryAfterMs > 0)) return;
    this.entries.set(key, {
      sentAtMs,
      untilMs: sentAtMs + decision.retryAfterMs,
      decision,
      specs: checks.map((check) => check.spec),
    });
  }

  /**
   * The denial for `key` at monotonic time `nowMs`, with every wait shortened by the time since, and
   * token-bucket balances brought forward by refill (a window's estimate is kept: it can only have
   * fallen, so `r` errs low); undefined when there is none (or it has run out).
   */
  lookup(key: string, nowMs: number): StoreDecision | undefined {
    // admitted traffic leaves the cache empty: then a lookup is one comparison, not a hash
    if (this.entries === undefined || this.entries.size === 0) return undefined;
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (nowMs >= entry.untilMs) {
      this.entries.delete(key);
      return undefined;
    }
    // what every limit says now, as its algorithm carries a denial forward; the wait ends when the store's did
    return carryDenialForward(entry.decision, entry.specs, Math.max(0, nowMs - entry.sentAtMs));
  }

  clear(): void {
    this.entries?.clear();
  }
}
