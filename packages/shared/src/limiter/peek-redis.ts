/**
 * Reading limit states from Redis without running the script: one MGET (a request's keys share a
 * hash tag, so one slot on a Cluster too) and Redis `TIME`, the clock the script decides on.
 */
import type { Cluster, Redis } from 'ioredis';
import type { LimitCheck, LimitOutcome } from './limits.js';
import { parseStoredState, peekOutcomes } from './peek.js';

/**
 * Each check's outcome now, charging nothing. `keyPrefix` is the store's (prepended to each key);
 * `nowMs` replaces Redis `TIME` (tests on a simulated clock).
 */
export async function peekRedis(
  client: Redis | Cluster,
  keyPrefix: string,
  checks: readonly LimitCheck[],
  nowMs?: number,
): Promise<LimitOutcome[]> {
  if (checks.length === 0) return [];
  const [values, time] = await Promise.all([
    client.mget(...checks.map((check) => keyPrefix + check.key)),
    nowMs === undefined ? client.time() : undefined,
  ]);
  // as acquire.lua reads TIME: seconds * 1000 + microseconds / 1000
  const atMs = time === undefined ? nowMs! : Number(time[0]) * 1000 + Number(time[1]) / 1000;
  const states = checks.map((check, i) => parseStoredState(check.spec, values[i]));
  return peekOutcomes(checks, states, atMs);
}
