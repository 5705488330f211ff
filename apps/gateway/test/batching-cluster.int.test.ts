/**
 * Batching and the per-node circuit breaker on a real Redis Cluster (3 masters, 1 replica each, started
 * on free ports by @sluice/test-support): a turn's requests over many slots and one hot key are batched
 * per slot (a batch mixing slots would fail with CROSSSLOT), and with one master SIGKILLed (before its
 * replica takes over) only the requests whose keys live there go to STORE_FAILURE.
 */
import { GuardedStore, type LimitCheck, limitKey, MemoryStore } from '@sluice/shared';
import { RedisStore } from '@sluice/shared/redis';
import { type RedisCluster, startRedisCluster } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueKeyPrefix } from './helpers/gateway.js';

const PREFIX = uniqueKeyPrefix('batching-cluster');
const spec = { algorithm: 'token-bucket', capacity: 50, refill: 1, periodMs: 60_000, maxDebt: 0 } as const;
const check = (client: string): LimitCheck[] => [{ key: limitKey('', 'batch', '', client), spec, cost: 1 }];

let cluster: RedisCluster;
let store: RedisStore;

beforeAll(async () => {
  // a long node timeout: the killed master is not failed over while the test looks
  cluster = await startRedisCluster({ nodeTimeoutMs: 10_000 });
  store = new RedisStore(
    { clusterNodes: [cluster.nodes[0]!.address] },
    { keyPrefix: PREFIX, commandTimeoutMs: 500 },
  );
  await store.ready();
  await store.acquire(check('warm-up'));
}, 60_000);

afterAll(async () => {
  await store?.close();
  await cluster?.close();
}, 30_000);

describe('batching on a Redis Cluster', () => {
  it('batches per slot: 300 clients over every master and a hot key, asked in one turn, all decided, fewer calls than requests', async () => {
    const before = store.scriptCalls;
    const clients = Array.from({ length: 300 }, (_, i) => store.acquire(check(`client-${i}`)));
    const hot = Array.from({ length: 100 }, () => store.acquire(check('hot')));
    const [perClient, onHot] = await Promise.all([Promise.all(clients), Promise.all(hot)]);
    expect(perClient.every((d) => d.allowed && d.limits[0]!.level === 49)).toBe(true);
    // the hot key's 100 requests, in order: exactly the bucket's 50 admitted, the first 50
    expect(onHot.map((d) => d.allowed)).toEqual(Array.from({ length: 100 }, (_, i) => i < 50));
    const calls = store.scriptCalls - before;
    // 300 clients in (almost always) distinct slots, the hot key's 100 in 2 batches of at most 64
    expect(calls).toBeLessThanOrEqual(300 + 2);
    expect(calls).toBeGreaterThanOrEqual(2);
  });
});

describe('a master SIGKILLed, before its replica takes over', () => {
  it("only the requests whose keys live on it go to STORE_FAILURE; the other masters' are decided by Redis", async () => {
    const guarded = new GuardedStore({
      primary: store,
      policy: 'local',
      local: new MemoryStore(),
      log: { info() {}, error() {} },
    });
    // clients whose keys live on each master
    const masters = (await cluster.topology()).filter((n) => n.role === 'master');
    const byMaster = new Map<number, string[]>();
    for (let i = 0; byMaster.size < masters.length || [...byMaster.values()].some((c) => c.length < 5); i++) {
      const client = `node-${i}`;
      const port = await cluster.masterOf(
        Number(await cluster.cli(masters[0]!.port, 'CLUSTER', 'KEYSLOT', PREFIX + check(client)[0]!.key)),
      );
      const list = byMaster.get(port) ?? [];
      if (list.length < 5) list.push(client);
      byMaster.set(port, list);
    }
    const [deadPort, ...livePorts] = [...byMaster.keys()];
    await cluster.kill(deadPort!);

    const onDead = [];
    for (let round = 0; round < 4; round++) {
      for (const client of byMaster.get(deadPort!)!) onDead.push(await guarded.acquire(check(client)));
    }
    expect(onDead.every((answer) => answer.kind === 'fallback')).toBe(true);
    expect(guarded.breakerStateOf(store.domainOf(check(byMaster.get(deadPort!)![0]!)))).toBe('open');

    for (const port of livePorts) {
      for (const client of byMaster.get(port)!) {
        const answer = await guarded.acquire(check(client));
        expect(answer.kind === 'store' && answer.decision.allowed).toBe(true);
      }
    }
  }, 30_000);
});
