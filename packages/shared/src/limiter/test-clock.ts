/**
 * Test helper: a clock a test sets by hand, given to a store as its `now` option. A store reads its
 * clock once, when a call is made, so a call made at an instant is decided at that instant even when
 * its answer comes later, and calls sent without waiting (a pipeline, a batch) each keep their own.
 */
export class SimulatedClock {
  nowMs: number;

  constructor(nowMs = 0) {
    this.nowMs = nowMs;
  }

  /** The store option: `{ now: clock.now }`. */
  readonly now = (): number => this.nowMs;

  /** Makes `call` at `nowMs`: `await clock.at(1_000, () => store.acquire(checks))`. */
  at<T>(nowMs: number, call: () => T): T {
    this.nowMs = nowMs;
    return call();
  }
}
