/** Seconds as the decision headers write them (IETF draft-ietf-httpapi-ratelimit-headers). */

/** Largest sf-integer (RFC 9651): bounds `w` and `t` for absurdly slow limits. */
const MAX_SF_INTEGER = 999_999_999_999_999;

/** Whole seconds, rounded up, for a whole number of ms (`t`, `w`, Retry-After). */
export function wholeSecondsUp(ms: number): number {
  return Math.min(Math.ceil(ms / 1000), MAX_SF_INTEGER);
}

/** The `w` of a policy item: whole seconds, rounded up, at least 1. */
export function windowSeconds(ms: number): number {
  return Math.max(1, wholeSecondsUp(ms));
}
