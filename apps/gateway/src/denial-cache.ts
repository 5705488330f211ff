/**
 * Denials remembered locally, so a client hammering a denied bucket costs no store round trip.
 *
 * Why this is exact, not an approximation: a denied request leaves the balance unchanged, and while
 * the balance is too low for a request of the rule's cost, no gateway can admit one either, so the
 * balance only rises by refill, at the rule's known rate. The store's `retryAfterMs` is therefore the
 * earliest moment any request of that (rule, client) could be admitted, and until then we can answer
 * denials ourselves. The window starts when the request was SENT to the store (not when the answer
 * came back), so our window ends no later than the store's: we may ask the store a little early,
 * never deny a request the store would admit.
 *
 * Entries are keyed by bucket key (rule id + client key). A rule change can change limits under the
 * same rule id, so the whole cache is cleared when the rule set changes.
 */
import type { BucketLimits, Decision } from '@sluice/shared';
import { LRUCache } from 'lru-cache';

interface CachedDenial {
  /** monotonic ms (performance.now) when the deciding request was sent to the store */
  sentAtMs: number;
  /** monotonic ms until which every request of this bucket is denied */
  untilMs: number;
  /** balance at the decision */
  balance: number;
  /** ms until full, at the decision */
  fullInMs: number;
  capacity: number;
  /** refill in tokens per millisecond */
  ratePerMs: number;
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

  /** Remembers a denial the store gave for a request sent at `sentAtMs` (monotonic ms). */
  remember(key: string, decision: Decision, limits: BucketLimits, sentAtMs: number): void {
    if (this.entries === undefined || decision.allowed || !(decision.retryAfterMs > 0)) return;
    this.entries.set(key, {
      sentAtMs,
      untilMs: sentAtMs + decision.retryAfterMs,
      balance: decision.balance,
      fullInMs: decision.fullInMs,
      capacity: limits.capacity,
      ratePerMs: limits.refill / limits.periodMs,
    });
  }

  /**
   * The denial for `key` at monotonic time `nowMs`, brought forward by refill, or undefined when
   * there is none (or it has run out).
   */
  lookup(key: string, nowMs: number): Decision | undefined {
    if (this.entries === undefined) return undefined;
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (nowMs >= entry.untilMs) {
      this.entries.delete(key);
      return undefined;
    }
    const elapsedMs = Math.max(0, nowMs - entry.sentAtMs);
    return {
      allowed: false,
      balance: Math.min(entry.capacity, entry.balance + entry.ratePerMs * elapsedMs),
      retryAfterMs: entry.untilMs - nowMs,
      fullInMs: Math.max(0, entry.fullInMs - elapsedMs),
    };
  }

  clear(): void {
    this.entries?.clear();
  }
}
