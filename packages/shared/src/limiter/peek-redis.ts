/**
 * Reading limit states from Redis without running the script: each check's own read (its plug-in
 * says which: a string GET, a sorted-set ZRANGE) and Redis `TIME`, the clock the script decides on,
 * in one MULTI: one round trip, and a state and clock of one moment.
 */
import type { Cluster, Redis } from 'ioredis';
import type { LimitCheck, LimitOutcome } from './limits.js';
import { parseStoredState, peekOutcomes, redisStateCommand } from './peek.js';
import { slotGroups } from './slot-groups.js';

/**
 * Each check's outcome now, charging nothing. `keyPrefix` is the store's (prepended to each key);
 * `nowMs` replaces Redis `TIME` (tests on a simulated clock). On a Redis Cluster, keys of different
 * hash tags (a per-client limit beside a `global` one) are read in one MULTI per tag, in parallel, and
 * decided on the first one's clock.
 */
export async function peekRedis(
  client: Redis | Cluster,
  keyPrefix: string,
  checks: readonly LimitCheck[],
  nowMs?: number,
): Promise<LimitOutcome[]> {
  if (checks.length === 0) return [];
  const keys = checks.map((check) => keyPrefix + check.key);
  const groups = client.isCluster ? slotGroups(keys) : [checks.map((_, i) => i)];
  const replies: unknown[] = new Array(checks.length);
  const clocks = await Promise.all(
    groups.map(async (indexes, g) => {
      const readsTime = g === 0 && nowMs === undefined;
      const commands = indexes.map((i) => {
        const [command, ...args] = redisStateCommand(checks[i]!.spec, keys[i]!);
        return [command.toLowerCase(), ...args]; // ioredis names its command methods in lower case
      });
      if (readsTime) commands.push(['time']);
      const results = await client.multi(commands).exec();
      if (results === null) throw new Error('peek: the MULTI was discarded');
      // a read that failed (WRONGTYPE: another algorithm's state under the key) is nothing stored
      indexes.forEach((i, j) => {
        replies[i] = results[j]![0] ? undefined : results[j]![1];
      });
      if (!readsTime) return undefined;
      const [error, time] = results[indexes.length]!;
      if (error) throw error;
      return time as [string, string];
    }),
  );
  const time = clocks[0];
  // as acquire.lua reads TIME: seconds * 1000 + microseconds / 1000
  const atMs = time === undefined ? nowMs! : Number(time[0]) * 1000 + Number(time[1]) / 1000;
  const states = checks.map((check, i) => parseStoredState(check.spec, replies[i]));
  return peekOutcomes(checks, states, atMs);
}
