/**
 * Keeps the concurrency slots of running exchanges: a slot is held until its exchange ends, however
 * long that takes (a streamed response, a WebSocket), so the gateway holding it renews it before it
 * expires, about every third of its lifetime. A gateway that dies stops renewing, and its slots come
 * back by themselves within one lifetime of their last renewal.
 *
 * One timer for every exchange, never one per request: an exchange shorter than a third of the
 * lifetime costs a Set add and delete, and each renewal is one store call, sent in the same
 * event-loop turn as the others due (so the Redis store batches them).
 */
import type { Exchange } from './exchange.js';

export class SlotKeeper {
  readonly #running = new Set<Exchange>();
  /** an exchange whose slots were taken or renewed this long ago is renewed, ms */
  readonly #renewAfterMs: number;
  readonly #now: () => number;
  #timer: ReturnType<typeof setInterval> | undefined;

  /**
   * @param lifetimeMs how long a slot lives after it is taken or renewed (UPSTREAM_TIMEOUT_MS + 5 s)
   * @param now the monotonic clock exchanges are stamped with
   */
  constructor(lifetimeMs: number, now: () => number) {
    this.#renewAfterMs = lifetimeMs / 3;
    this.#now = now;
  }

  /** exchanges holding slots now */
  get size(): number {
    return this.#running.size;
  }

  /** An admitted exchange holds slots: keep them until it ends. */
  hold(exchange: Exchange): void {
    this.#running.add(exchange);
    if (this.#timer === undefined) {
      // ticking twice per third: a renewal comes between a third and half of the lifetime after the last
      this.#timer = setInterval(() => this.renewDue(), this.#renewAfterMs / 2);
      this.#timer.unref();
    }
  }

  /** The exchange ended (its slots are given back). */
  release(exchange: Exchange): void {
    this.#running.delete(exchange);
  }

  /** Renews every exchange due; the timer stops while none runs. Returns how many were renewed. */
  renewDue(): number {
    const nowMs = this.#now();
    let renewed = 0;
    for (const exchange of this.#running) {
      if (exchange.ended) {
        this.#running.delete(exchange);
        continue;
      }
      if (nowMs - exchange.renewedAtMs < this.#renewAfterMs) continue;
      exchange.renew();
      renewed++;
    }
    if (this.#running.size === 0) this.close();
    return renewed;
  }

  /** Stops the timer (the gateway closes; exchanges still running give their slots back as they end). */
  close(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
