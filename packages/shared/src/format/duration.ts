/** Durations as rules write them: `"500ms"`, `"1s"`, `"1.5m"`, `"1h"`, `"1d"`, or an integer of milliseconds. */

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** The string form the rule schema accepts; kept beside the parser so they cannot drift. */
export const DURATION_PATTERN = '^([0-9]{1,9}(?:\\.[0-9]{1,6})?)(ms|s|m|h|d)$';
const DURATION_RE = new RegExp(DURATION_PATTERN);

/** Longest period a rule may use: one year, so rates stay far from float underflow. */
export const MAX_DURATION_MS = 365 * UNIT_MS.d;

export class DurationError extends Error {
  readonly code = 'DURATION_INVALID';
}

/** Milliseconds of a duration; throws `DurationError` unless it is > 0 and ≤ one year. */
export function parseDuration(value: string | number): number {
  let ms: number;
  if (typeof value === 'number') {
    if (!Number.isInteger(value))
      throw new DurationError('must be an integer of milliseconds or a string like "1s"');
    ms = value;
  } else {
    const m = DURATION_RE.exec(value);
    if (!m) throw new DurationError(`"${value}" is not a duration like "500ms", "1s", "1m", "1h" or "1d"`);
    ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  }
  // microsecond resolution is plenty and keeps "1.000001s" from carrying float noise
  ms = Math.round(ms * 1000) / 1000;
  if (!(ms >= 1)) throw new DurationError('must be at least 1ms');
  if (ms > MAX_DURATION_MS) throw new DurationError('must be at most 365d');
  return ms;
}
