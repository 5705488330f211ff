/**
 * What a stored state records about the limit it was written under (issue 19: an edit never corrupts
 * state). A token bucket or sliding window stores its numbers with a tag naming its algorithm and the
 * parameters that give those numbers their meaning (`T<capacity>/<refill>/<periodMs>`,
 * `W<max>/<windowMs>`), so that after an edit the new version of the limit knows the state was written
 * under another one: it converts it (a window of another length) or bounds it (a debt beyond the new
 * `maxDebt`), and a settlement computed for the older version is dropped instead of applied to the new
 * state. A state whose tag names another algorithm is nothing to this one: its counters start afresh.
 *
 * Tags are made from `String(x)` of each number, which both TypeScript and Lua (`tonumber`) read back
 * as the same double, so the two stores compare and convert alike.
 */

/**
 * Memoises a per-spec string: a rule set's specs live as long as it, so each tag (or argument list) is
 * computed once per rule set rather than once per request.
 */
export function perSpec<S extends object, T>(compute: (spec: S) => T): (spec: S) => T {
  const cache = new WeakMap<S, T>();
  return (spec) => {
    let value = cache.get(spec);
    if (value === undefined) {
      value = compute(spec);
      cache.set(spec, value);
    }
    return value;
  };
}

/** What a settlement on a state written under another version of its limit comes to: nothing. */
export const DROPPED = { dropped: true } as const;
export type Dropped = typeof DROPPED;
