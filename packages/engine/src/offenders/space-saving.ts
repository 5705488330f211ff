/**
 * Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements
 * in data streams", 2005): the heavy hitters of a stream in at most `capacity` counters.
 *
 * While at most `capacity` distinct items have been seen, every count is exact. Past that, a new item
 * takes over the smallest counter and inherits its count (remembered as the item's `error`), so a
 * count never under-states an item's true total, over-states it by at most `error`, and any item whose
 * true total exceeds (total of the stream) / capacity is always held.
 *
 * Written here rather than taken from a library: it is a few dozen lines, and the libraries that
 * offer a top-k (bloom-filters' TopK over a Count-Min sketch) are not exact for few items and pull in
 * several dependencies. The minimum is found by a scan, only when a new item arrives at a full
 * summary; a repeat offender (a denial flood) is one map update.
 */

export interface Counted {
  readonly item: string;
  /** an upper bound on the item's true count (exact while the summary never evicted) */
  readonly count: number;
  /** how much of `count` may be inherited from evicted items; 0 while exact */
  readonly error: number;
}

export class SpaceSaving {
  readonly capacity: number;
  readonly #counters = new Map<string, { count: number; error: number }>();

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError('capacity must be a whole number > 0');
    this.capacity = capacity;
  }

  /** Items held (never more than `capacity`). */
  get size(): number {
    return this.#counters.size;
  }

  /** Counts `weight` (> 0) more of `item`. */
  add(item: string, weight = 1): void {
    const counter = this.#counters.get(item);
    if (counter !== undefined) {
      counter.count += weight;
      return;
    }
    if (this.#counters.size < this.capacity) {
      this.#counters.set(item, { count: weight, error: 0 });
      return;
    }
    let minItem = '';
    let min = Infinity;
    for (const [held, { count }] of this.#counters) {
      if (count < min) {
        min = count;
        minItem = held;
      }
    }
    this.#counters.delete(minItem);
    this.#counters.set(item, { count: min + weight, error: min });
  }

  /** The count of `item` (0 when not held). */
  count(item: string): number {
    return this.#counters.get(item)?.count ?? 0;
  }

  /** Every held item, most counted first. */
  items(): Counted[] {
    return [...this.#counters]
      .map(([item, { count, error }]) => ({ item, count, error }))
      .sort((a, b) => b.count - a.count || (a.item < b.item ? -1 : a.item > b.item ? 1 : 0));
  }
}
