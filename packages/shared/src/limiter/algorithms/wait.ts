/**
 * The one wait search every algorithm uses (its Lua twin is `waitMs` in acquire.lua): the smallest
 * whole number of ms after which a condition holds with no further traffic.
 *
 * Waits are found by evaluating the very expression that decides, never by solving it in real
 * numbers: a retry at `now + wait` is then admitted and one at `now + (wait - 1)` is denied,
 * exactly, whatever the float rounding. The condition must be monotone in time (false, then true
 * forever), which every algorithm's "with no further traffic" predicate is.
 */

/**
 * Longest wait ever reported, in ms (~31,700 years): a wait of exactly this means "at least this
 * long" (absurdly slow refill, a huge window, or a rate that underflows to 0). A store keeps such
 * state without expiry rather than let it expire early.
 */
export const MAX_WAIT_MS = 1e15;

/**
 * The smallest whole `x` (ms) with `at(x)` true, capped at `MAX_WAIT_MS`. `estimateMs` is a real-number
 * guess of the answer (any value, even NaN): it only says where the search starts. Brackets from the
 * guess, doubling its step, then bisects; a good guess settles in about two evaluations.
 */
export function waitMs(at: (x: number) => boolean, estimateMs: number): number {
  if (at(0)) return 0;
  let x = estimateMs < MAX_WAIT_MS ? Math.ceil(estimateMs) : MAX_WAIT_MS;
  if (!(x >= 1)) x = 1;
  let lo: number; // `at(lo)` is false
  let hi: number; // `at(hi)` is true
  let step = 1;
  if (at(x)) {
    hi = x;
    lo = 0;
    while (hi - step > 0) {
      const candidate = hi - step;
      if (!at(candidate)) {
        lo = candidate;
        break;
      }
      hi = candidate;
      step *= 2;
    }
  } else {
    lo = x;
    for (;;) {
      const candidate = lo + step;
      if (candidate >= MAX_WAIT_MS) {
        if (!at(MAX_WAIT_MS)) return MAX_WAIT_MS;
        hi = MAX_WAIT_MS;
        break;
      }
      if (at(candidate)) {
        hi = candidate;
        break;
      }
      lo = candidate;
      step *= 2;
    }
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (at(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}
