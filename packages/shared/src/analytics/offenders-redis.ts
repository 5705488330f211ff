/**
 * Top offenders in Redis: the gateway's flush (one pipeline of ZINCRBY + EXPIRE per flush, never a call
 * per denial) and the rules API's read (ZUNIONSTORE of the asked minutes into a temporary key, the top
 * of it, then DEL, in one MULTI). Works on a single Redis and on a Redis Cluster: one rule's keys share
 * a hash tag, so a Cluster gets one pipeline per rule instead of one in all.
 */
import { randomBytes } from 'node:crypto';
import { createRedisClient, type RedisClient } from '../limiter/redis/client.js';
import {
  compareOffenders,
  OFFENDERS_KEY_TTL_SECONDS,
  OFFENDERS_TOP,
  type OffenderItem,
  offenderItemOf,
  offendersKey,
  type RuleOffenderCounts,
} from './offenders.js';

/** The commands used here, which both an ioredis `Redis` and a `Cluster` have. */
export type AnalyticsRedis = RedisClient;

/**
 * Adds `counts` (rule id → minute → member → denials) to the sorted sets, refreshing their expiry.
 * One pipeline in all on a single Redis; one per rule on a Cluster (a rule's keys share a slot).
 */
export async function addOffenderCounts(
  redis: AnalyticsRedis,
  prefix: string,
  counts: ReadonlyMap<string, RuleOffenderCounts>,
): Promise<void> {
  if (counts.size === 0) return;
  const pipelines: ReturnType<AnalyticsRedis['pipeline']>[] = [];
  for (const [ruleId, minutes] of counts) {
    if (pipelines.length === 0 || redis.isCluster) pipelines.push(redis.pipeline());
    const pipeline = pipelines[pipelines.length - 1]!;
    for (const [minute, members] of minutes) {
      const key = offendersKey(prefix, ruleId, minute);
      for (const [member, denied] of members) pipeline.zincrby(key, denied, member);
      pipeline.expire(key, OFFENDERS_KEY_TTL_SECONDS);
    }
  }
  const results = await Promise.all(pipelines.map((p) => p.exec()));
  for (const result of results) {
    const failed = result?.find(([error]) => error !== null);
    if (failed) throw failed[0];
  }
}

/** The top offenders of one rule over the `minutes` minutes up to and including `nowMinute`. */
export async function readTopOffenders(
  redis: AnalyticsRedis,
  prefix: string,
  ruleId: string,
  minutes: number,
  nowMinute: number,
): Promise<OffenderItem[]> {
  const keys: string[] = [];
  for (let m = nowMinute - minutes + 1; m <= nowMinute; m++) keys.push(offendersKey(prefix, ruleId, m));
  // in the rule's slot (same hash tag), unique per call, removed in the same MULTI
  const temp = `${offendersKey(prefix, ruleId, nowMinute)}:merge:${randomBytes(6).toString('hex')}`;
  const result = await redis
    .multi()
    .zunionstore(temp, keys.length, ...keys)
    // a few more than needed: members this code did not write are skipped
    .zrevrange(temp, 0, OFFENDERS_TOP * 2 - 1, 'WITHSCORES')
    .del(temp)
    .exec();
  if (result === null) throw new Error('Redis discarded the offenders transaction');
  const failed = result.find(([error]) => error !== null);
  if (failed) throw failed[0];
  const flat = result[1]![1] as string[];
  const items: OffenderItem[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const item = offenderItemOf(flat[i]!, Number(flat[i + 1]));
    if (item !== undefined) items.push(item);
  }
  return items.sort(compareOffenders).slice(0, OFFENDERS_TOP);
}

export interface AnalyticsRedisOptions {
  /** `redis://…`; or */
  url?: string;
  /** `host:port` seed nodes of a Redis Cluster (IPv6 in brackets) */
  clusterNodes?: readonly string[];
  /** per-command timeout, ms; default 1000 (an analytics read is on no request's path) */
  commandTimeoutMs?: number;
}

/**
 * A client for reading analytics (the rules API), made as the limiter's is (`createRedisClient`):
 * commands fail fast while Redis is away (no offline queue) and it reconnects in the background.
 */
export function openAnalyticsRedis(options: AnalyticsRedisOptions): AnalyticsRedis {
  const commandTimeoutMs = options.commandTimeoutMs ?? 1_000;
  if (options.clusterNodes !== undefined && options.clusterNodes.length > 0) {
    return createRedisClient({ clusterNodes: options.clusterNodes }, { commandTimeoutMs });
  }
  if (options.url !== undefined) return createRedisClient(options.url, { commandTimeoutMs });
  throw new Error('openAnalyticsRedis needs a url or cluster nodes');
}
