/**
 * What gateways sharing one Redis share besides the limits (store.ts `SharedChannels`): their
 * heartbeat, one sorted set (member: a gateway's id, score: its last beat's time) written, pruned
 * and counted in one pipeline; and their top-offender counts (analytics/offenders-redis.ts).
 */

import type { RuleOffenderCounts } from '../analytics/offenders.js';
import { addOffenderCounts } from '../analytics/offenders-redis.js';
import type { RedisClient } from './redis/client.js';
import type { SharedChannels } from './store.js';

export class RedisSharedChannels implements SharedChannels {
  readonly #redis: RedisClient;
  readonly #keyPrefix: string;
  /** the hash tag keeps the set in one slot of a Cluster */
  readonly #gatewaysKey: string;

  constructor(redis: RedisClient, keyPrefix: string) {
    this.#redis = redis;
    this.#keyPrefix = keyPrefix;
    this.#gatewaysKey = `${keyPrefix}{sluice:gateways}`;
  }

  async beat(member: string, nowMs: number, aliveWithinMs: number): Promise<number> {
    const replies = await this.#redis
      .pipeline()
      .zadd(this.#gatewaysKey, nowMs, member)
      .zremrangebyscore(this.#gatewaysKey, '-inf', nowMs - aliveWithinMs)
      .zcard(this.#gatewaysKey)
      .pexpire(this.#gatewaysKey, 2 * aliveWithinMs)
      .exec();
    const count = replies?.[2]?.[1];
    if (typeof count !== 'number') throw new Error(`unreadable heartbeat reply: ${JSON.stringify(replies)}`);
    return count;
  }

  async leave(member: string): Promise<void> {
    await this.#redis.zrem(this.#gatewaysKey, member);
  }

  addOffenderCounts(counts: ReadonlyMap<string, RuleOffenderCounts>): Promise<void> {
    return addOffenderCounts(this.#redis, this.#keyPrefix, counts);
  }
}
