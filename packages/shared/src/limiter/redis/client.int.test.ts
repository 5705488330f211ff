/**
 * The one Redis client factory, as the limiter and analytics use it, on the real Redis
 * (127.0.0.1:6379). It writes no key.
 */
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { openAnalyticsRedis } from '../../analytics/offenders-redis.js';
import { createRedisClient, whenReady } from './client.js';

const REDIS_URL = 'redis://127.0.0.1:6379';

describe('createRedisClient', () => {
  it('makes a client that fails fast rather than queue, with the command timeout each user asks for', async () => {
    const limiter = createRedisClient(REDIS_URL);
    const analytics = openAnalyticsRedis({ url: REDIS_URL });
    try {
      expect(limiter).toBeInstanceOf(Redis);
      // not connected yet: refused at once, not queued until the connection is up
      await expect(limiter.ping()).rejects.toThrow(/enableOfflineQueue options is false/);
      await Promise.all([whenReady(limiter, 2_000), whenReady(analytics, 2_000)]);
      expect(await limiter.ping()).toBe('PONG');
      expect(await analytics.ping()).toBe('PONG');
      const limiterOptions = (limiter as Redis).options;
      const analyticsOptions = (analytics as Redis).options;
      expect([limiterOptions.enableOfflineQueue, analyticsOptions.enableOfflineQueue]).toEqual([
        false,
        false,
      ]);
      expect([limiterOptions.commandTimeout, analyticsOptions.commandTimeout]).toEqual([50, 1_000]);
    } finally {
      limiter.disconnect();
      analytics.disconnect();
    }
  });

  it('makes a Cluster client from host:port seeds, IPv6 in brackets included, for the limiter and analytics alike', () => {
    const seeds = ['redis-1:6379', '[::1]:7000'];
    const limiter = createRedisClient({ clusterNodes: seeds }, { commandTimeoutMs: 80 });
    const analytics = openAnalyticsRedis({ clusterNodes: seeds });
    try {
      for (const client of [limiter, analytics]) {
        expect(client).toBeInstanceOf(Cluster);
        expect((client as Cluster).options).toMatchObject({
          enableOfflineQueue: false,
          scaleReads: 'master',
        });
      }
      expect((limiter as Cluster).options.redisOptions?.commandTimeout).toBe(80);
      expect((analytics as Cluster).options.redisOptions?.commandTimeout).toBe(1_000);
    } finally {
      limiter.disconnect();
      analytics.disconnect();
    }
  });

  it('refuses a seed list it could not connect to, naming the bad seed', () => {
    expect(() => createRedisClient({ clusterNodes: ['redis-1:6379', '::1:7000'] })).toThrow(
      new RangeError('not a host:port Redis Cluster node: "::1:7000"'),
    );
    expect(() => createRedisClient({ clusterNodes: [] })).toThrow(/at least one seed node/);
  });
});
