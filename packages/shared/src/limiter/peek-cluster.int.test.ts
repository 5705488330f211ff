/**
 * peek (GET /usage) on a real Redis Cluster: a rule's per-client limits and its global one live under
 * different hash tags, so on different nodes; each tag is read in a MULTI of its own, charging nothing.
 */
import { type RedisCluster, startRedisCluster } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limitKeyName } from './algorithms/index.js';
import { type LimitCheck, type LimitSpec, limitKey } from './limits.js';
import { usageOf } from './peek.js';
import { peekRedis } from './peek-redis.js';
import { RedisStore } from './redis-store.js';
import { hashTagOf } from './slot-groups.js';

const PREFIX = 'test:peek-cluster:';
let cluster: RedisCluster;
let store: RedisStore;

beforeAll(async () => {
  cluster = await startRedisCluster();
  store = new RedisStore(
    { clusterNodes: [cluster.nodes[0]!.address] },
    { keyPrefix: PREFIX, commandTimeoutMs: 5_000 },
  );
  await store.ready();
}, 60_000);

afterAll(async () => {
  await store?.close();
  await cluster?.close();
}, 30_000);

describe('peek on a Redis Cluster', () => {
  it("reads limits under several hash tags in one call, a concurrency limit's slots included", async () => {
    const bucket: LimitSpec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 60_000,
      maxDebt: 0,
    };
    const slots: LimitSpec = { algorithm: 'concurrency', max: 4, leaseMs: 30_000 };
    const check = (name: string, spec: LimitSpec, clientKey: string): LimitCheck => ({
      key: limitKey('', 'rule-c', limitKeyName(spec, name), clientKey),
      spec,
      cost: 1,
    });
    const checks = [
      check('burst', bucket, 'ip:10.0.0.7'),
      check('inflight', slots, 'ip:10.0.0.7'),
      check('everyone', bucket, 'global'),
    ];
    expect(new Set(checks.map((c) => hashTagOf(c.key))).size).toBe(2);
    for (const leaseId of ['one', 'two', 'three']) {
      expect((await store.acquire(checks.map((c) => ({ ...c, leaseId })))).allowed).toBe(true);
    }
    const outcomes = await peekRedis(store.client, PREFIX, checks);
    expect(outcomes.map((outcome, i) => usageOf(checks[i]!.spec, outcome))).toMatchObject([
      { remaining: 7, inFlight: 0 },
      { remaining: 1, inFlight: 3 },
      { remaining: 7, inFlight: 0 },
    ]);
    // nothing was charged
    expect(await peekRedis(store.client, PREFIX, checks)).toMatchObject(
      outcomes.map((o) => ({ remaining: o.remaining })),
    );
  }, 30_000);
});
