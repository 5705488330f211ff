/**
 * Gateways on a real Redis Cluster (3 masters, 1 replica each, started on free ports by
 * @sluice/test-support): the limiter's library loaded on every master and again on a master that lost
 * it (the script reloaded where there is no library), keys spread over every master,
 * two gateways admitting what one bucket allows, a stacked rule whose limits live in different slots
 * (a denial by the later one gives back the earlier one's charge; a refund settles both), a slot
 * migrated under load, and a master SIGKILLed under load (its replica takes over; zero 5xx with
 * STORE_FAILURE=local).
 *
 * Admissions are measured on Redis's clock, as in cluster.int.test.ts: T runs from Redis `TIME` just
 * before the load to the last admission (the `updatedAtMs` the bucket state carries).
 */
import { Agent } from 'node:http';
import { ACQUIRE_FUNCTION, RedisStore } from '@sluice/shared/redis';
import { type RedisCluster, sleep, startRedisCluster, waitFor } from '@sluice/test-support';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const PREFIX = uniqueKeyPrefix('redis-cluster');

let cluster: RedisCluster;
let admin: Cluster;
let api: RulesApi;
let upstream: Upstream;
const gateways: RunningGateway[] = [];

beforeAll(async () => {
  [cluster, api, upstream] = await Promise.all([startRedisCluster(), startRulesApi(), startUpstream()]);
  admin = new Cluster(
    cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
    { scaleReads: 'master' },
  );
  await admin.ping();
}, 60_000);

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()));
  admin?.disconnect();
  await Promise.all([api?.close(), upstream?.close(), cluster?.close()]);
}, 30_000);

async function gatewayOnCluster(env: Record<string, string> = {}): Promise<RunningGateway> {
  const gateway = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_CLUSTER_NODES: cluster.seeds,
    REDIS_KEY_PREFIX: PREFIX,
    ...env,
  });
  gateways.push(gateway);
  return gateway;
}

/** Waits until every gateway has the rules API's latest snapshot. */
async function rulesReached(...of: RunningGateway[]): Promise<void> {
  const version = await api.snapshotVersion();
  await waitFor(
    () => of.every((gateway) => (gateway.gateway.rules.current?.version ?? -1) >= version),
    10_000,
    'the gateways to load the new rules',
  );
}

async function redisNowMs(): Promise<number> {
  const [seconds, micros] = (await cluster.cli(cluster.nodes[0]!.port, 'TIME')).split('\n');
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

async function metric(gateway: RunningGateway, name: string, labels: Record<string, string> = {}) {
  const value = metricValue(await (await fetch(`${gateway.adminUrl}/metrics`)).text(), name, labels);
  return Number.isNaN(value) ? 0 : value;
}

async function slotOf(key: string): Promise<number> {
  return Number(await cluster.cli(cluster.nodes[0]!.port, 'CLUSTER', 'KEYSLOT', key));
}

interface LoadResult {
  admitted: number;
  denied: number;
  other: number;
}

/** Closed-loop load: `workers` per gateway for `durationMs`, each request built by `request(i)`. */
async function load(
  targets: RunningGateway[],
  durationMs: number,
  workers: number,
  path: (n: number) => string,
  headers: (n: number) => Record<string, string> = () => ({}),
): Promise<LoadResult> {
  const result: LoadResult = { admitted: 0, denied: 0, other: 0 };
  const deadline = performance.now() + durationMs;
  let n = 0;
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: workers }));
  await Promise.all(
    targets.flatMap((gateway, g) =>
      Array.from({ length: workers }, async () => {
        while (performance.now() < deadline) {
          const i = n++;
          const answer = await http(gateway.port, path(i), { agent: agents[g], headers: headers(i) });
          if (answer.status === 200) result.admitted++;
          else if (answer.status === 429) result.denied++;
          else result.other++;
        }
      }),
    ),
  );
  for (const agent of agents) agent.destroy();
  return result;
}

describe('a RedisStore on the cluster', () => {
  const spec = { algorithm: 'token-bucket', capacity: 5, refill: 1, periodMs: 60_000, maxDebt: 0 } as const;

  it('loads its library on every master, and on a master that lost it (FUNCTION FLUSH) answers by the script, then loads it again', async () => {
    const store = new RedisStore(
      { clusterNodes: [cluster.nodes[0]!.address] },
      { keyPrefix: PREFIX, commandTimeoutMs: 2_000 },
    );
    const libraryOn = async (port: number) =>
      (await cluster.cli(port, 'FUNCTION', 'LIST')).includes(ACQUIRE_FUNCTION);
    try {
      await store.ready();
      expect(store.scriptMode).toBe('function');
      const masters = (await cluster.topology()).filter((node) => node.role === 'master');
      expect(masters).toHaveLength(3);
      for (const master of masters) expect(await libraryOn(master.port)).toBe(true);
      const check = { key: '{nofunction:ip:1}', spec, cost: 1 };
      expect((await store.acquire([check])).limits[0]!.level).toBe(4);
      const master = await cluster.masterOf(await slotOf(PREFIX + check.key));
      expect(await cluster.cli(master, 'FUNCTION', 'FLUSH')).toBe('OK');
      expect(await libraryOn(master)).toBe(false);
      expect((await store.acquire([check])).limits[0]!.level).toBeCloseTo(3, 2);
      await store.ready(); // the load the lost function started
      expect(store.scriptMode).toBe('function');
      expect(await libraryOn(master)).toBe(true);
      expect((await store.acquire([check])).limits[0]!.level).toBeCloseTo(2, 2);
    } finally {
      await store.close();
    }
  });

  it('without functions, reloads its script on a master that lost it (SCRIPT FLUSH), without an error', async () => {
    const store = new RedisStore(
      { clusterNodes: [cluster.nodes[0]!.address] },
      { keyPrefix: PREFIX, commandTimeoutMs: 2_000, functions: false },
    );
    try {
      await store.ready();
      const check = { key: '{noscript:ip:1}', spec, cost: 1 };
      expect((await store.acquire([check])).limits[0]!.level).toBe(4);
      const master = await cluster.masterOf(await slotOf(PREFIX + check.key));
      expect(await cluster.cli(master, 'SCRIPT', 'FLUSH')).toBe('OK');
      expect((await store.acquire([check])).limits[0]!.level).toBeCloseTo(3, 2);
    } finally {
      await store.close();
    }
  });
});

describe('gateways on the cluster', () => {
  let pair: RunningGateway[];

  beforeAll(async () => {
    pair = [
      // measure coordination, not the local fallback a CPU-starved machine could trigger
      await gatewayOnCluster({ STORE_TIMEOUT_MS: '2000' }),
      await gatewayOnCluster({ STORE_TIMEOUT_MS: '2000' }),
    ];
  }, 30_000);

  it('spread per-client keys over every master', async () => {
    const rule = await api.createRule({
      name: 'spread',
      match: { path: '/spread/**' },
      client: { by: 'header', name: 'x-client' },
      limit: { capacity: 10, refill: 1, period: '1m' },
    });
    await rulesReached(...pair);
    for (let i = 0; i < 60; i++) {
      const answer = await http(pair[i % 2]!.port, '/spread/x', { headers: { 'x-client': `c${i}` } });
      expect(answer.status).toBe(200);
    }
    const masters = (await cluster.topology()).filter((node) => node.role === 'master');
    const perMaster: number[] = [];
    for (const master of masters) {
      const keys = await cluster.cli(master.port, '--scan', '--pattern', `${PREFIX}{${rule.id}:*`);
      perMaster.push(keys.split('\n').filter(Boolean).length);
    }
    expect(perMaster.reduce((a, b) => a + b, 0)).toBe(60);
    for (const count of perMaster) expect(count, JSON.stringify(perMaster)).toBeGreaterThan(0);
  });

  it('two gateways admit capacity + rate·T between them, within 0.99–1.005', async () => {
    const CAPACITY = 100;
    const RATE = 100;
    const rule = await api.createRule({
      name: 'shared',
      match: { path: '/shared/**' },
      client: { by: 'global' },
      limit: { capacity: CAPACITY, refill: RATE, period: '1s' },
    });
    await rulesReached(...pair);
    const startMs = await redisNowMs();
    const result = await load(pair, 3_000, 4, () => '/shared/x');
    const state = await admin.get(`${PREFIX}{${rule.id}:global}`);
    const spanSec = (Number(state?.split(' ')[1]) - startMs) / 1000;
    const ratio = result.admitted / (CAPACITY + RATE * spanSec);
    const fallbacks = (await Promise.all(pair.map((g) => metric(g, 'sluice_store_fallbacks_total')))).reduce(
      (a, b) => a + b,
    );
    const summary = JSON.stringify({ ...result, spanSec, ratio, fallbacks });
    expect(result.other, summary).toBe(0);
    expect(fallbacks, summary).toBe(0);
    expect(result.denied, summary).toBeGreaterThan(result.admitted);
    expect(ratio, summary).toBeGreaterThanOrEqual(0.99);
    expect(ratio, summary).toBeLessThanOrEqual(1.005);
  }, 20_000);

  it('decide a per-client limit and a global one in different slots; a global denial gives the client limit back', async () => {
    const rule = await api.createRule({
      name: 'stacked',
      match: { path: '/stacked/**' },
      limits: [
        { name: 'burst', client: { by: 'header', name: 'x-client' }, capacity: 5, refill: 1, period: '1h' },
        { name: 'everyone', client: { by: 'global' }, capacity: 3, refill: 1, period: '1h' },
      ],
    } as unknown as RuleBody);
    await rulesReached(...pair);
    const burstKey = (client: string) => `${PREFIX}{${rule.id}:header:${client}}:burst`;
    const globalKey = `${PREFIX}{${rule.id}:global}:everyone`;
    const balance = async (key: string) => {
      const state = await admin.get(key);
      return state === null ? null : Number(state.split(' ')[0]);
    };
    expect(await slotOf(burstKey('a'))).not.toBe(await slotOf(globalKey));

    for (let i = 0; i < 3; i++) {
      const answer = await http(pair[i % 2]!.port, '/stacked/x', { headers: { 'x-client': 'a' } });
      expect(answer.status).toBe(200);
    }
    expect(await balance(burstKey('a'))).toBeCloseTo(2, 2);
    expect(await balance(globalKey)).toBeCloseTo(0, 2);

    // denied by the global limit: a's burst was charged first, and given back at once
    const denied = await http(pair[0]!.port, '/stacked/x', { headers: { 'x-client': 'a' } });
    expect(denied.status).toBe(429);
    expect(denied.json()).toMatchObject({ limit: 'everyone' });
    expect(await balance(burstKey('a'))).toBeCloseTo(2, 2);
    expect(denied.headers.ratelimit).toMatch(
      /^"stacked\.burst";r=2;t=\d+;pk=:[\w+/]+=*:, "stacked\.everyone";r=0;t=\d+$/,
    );

    // a client never seen: its burst is full again (the give-back filled it, so its key is gone)
    const fresh = await http(pair[1]!.port, '/stacked/x', { headers: { 'x-client': 'b' } });
    expect(fresh.status).toBe(429);
    expect(await balance(burstKey('b'))).toBeNull();
  });

  it('settle a refund across slots, one call per slot group', async () => {
    const rule = await api.createRule({
      name: 'refunded',
      match: { path: '/headers/**' },
      limits: [
        { name: 'burst', client: { by: 'header', name: 'x-client' }, capacity: 5, refill: 1, period: '1h' },
        { name: 'everyone', client: { by: 'global' }, capacity: 5, refill: 1, period: '1h' },
      ],
      refund: { statuses: ['5xx'] },
    } as unknown as RuleBody);
    await rulesReached(...pair);
    const balance = async (key: string) => Number((await admin.get(key))?.split(' ')[0] ?? Number.NaN);
    const burstKey = `${PREFIX}{${rule.id}:header:r}:burst`;
    const globalKey = `${PREFIX}{${rule.id}:global}:everyone`;
    expect((await http(pair[0]!.port, '/headers/x', { headers: { 'x-client': 'r' } })).status).toBe(200);
    expect(await balance(burstKey)).toBeCloseTo(4, 2);
    expect(await balance(globalKey)).toBeCloseTo(4, 2);
    // a 503 from the upstream gives both limits their charge back (two slots: two settle calls)
    const refunded = await http(pair[0]!.port, '/headers/x?status=503', { headers: { 'x-client': 'r' } });
    expect(refunded.status).toBe(503);
    await waitFor(
      async () =>
        Math.abs((await balance(burstKey)) - 4) < 0.01 && Math.abs((await balance(globalKey)) - 4) < 0.01,
      2_000,
      'the refund of both limits',
    );
    expect(await metric(pair[0]!, 'sluice_settlements_total', { kind: 'refund', result: 'error' })).toBe(0);
  });

  it('follow a slot migrated under load without a wrong decision', async () => {
    const CAPACITY = 50;
    const RATE = 100;
    const rule = await api.createRule({
      name: 'migrating',
      match: { path: '/migrating/**' },
      client: { by: 'global' },
      limit: { capacity: CAPACITY, refill: RATE, period: '1s' },
    });
    await rulesReached(...pair);
    const key = `${PREFIX}{${rule.id}:global}`;
    const slot = await slotOf(key);
    const topology = await cluster.topology();
    const source = topology.find(
      (node) => node.role === 'master' && node.slots.some(([a, b]) => a <= slot && slot <= b),
    )!;
    const target = topology.find((node) => node.role === 'master' && node.id !== source.id)!;

    const fallbacksBefore = await Promise.all(pair.map((g) => metric(g, 'sluice_store_fallbacks_total')));
    const startMs = await redisNowMs();
    const running = load(pair, 3_000, 4, () => '/migrating/x');
    await sleep(1_000);
    expect(await admin.exists(key)).toBe(1);
    // the steps of redis-cli --cluster reshard, for one slot
    await cluster.cli(target.port, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', source.id);
    await cluster.cli(source.port, 'CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', target.id);
    await sleep(300); // decisions meanwhile run on the source (the key is still there)
    const keys = (await cluster.cli(source.port, 'CLUSTER', 'GETKEYSINSLOT', String(slot), '100'))
      .split('\n')
      .filter(Boolean);
    await cluster.cli(
      source.port,
      'MIGRATE',
      '127.0.0.1',
      String(target.port),
      '',
      '0',
      '5000',
      'KEYS',
      ...keys,
    );
    await sleep(300); // ASK: decisions now follow the key to the target
    for (const node of [target, source]) {
      await cluster.cli(node.port, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', target.id);
    }
    const result = await running;
    expect(await cluster.masterOf(slot)).toBe(target.port);

    const state = await admin.get(key);
    const spanSec = (Number(state?.split(' ')[1]) - startMs) / 1000;
    const ratio = result.admitted / (CAPACITY + RATE * spanSec);
    const fallbacksAfter = await Promise.all(pair.map((g) => metric(g, 'sluice_store_fallbacks_total')));
    const fallbacks = fallbacksAfter[0]! + fallbacksAfter[1]! - fallbacksBefore[0]! - fallbacksBefore[1]!;
    const summary = JSON.stringify({ ...result, spanSec, ratio, fallbacks });
    expect(result.other, summary).toBe(0);
    // every decision was Redis's: redirections followed, none failed over to the local policy
    expect(fallbacks, summary).toBe(0);
    expect(ratio, summary).toBeGreaterThanOrEqual(0.99);
    expect(ratio, summary).toBeLessThanOrEqual(1.005);
  }, 20_000);
});

describe('a master SIGKILLed under load', () => {
  it('zero 5xx with STORE_FAILURE=local; its replica takes over and decisions are back on Redis by themselves', async () => {
    const gateway = await gatewayOnCluster({ STORE_FAILURE: 'local', STORE_TIMEOUT_MS: '200' });
    const rule = await api.createRule({
      name: 'failover',
      match: { path: '/failover/**' },
      client: { by: 'header', name: 'x-client' },
      // slow refill: a client's bucket state stays in Redis (it lives until the bucket is full again)
      limit: { capacity: 10_000, refill: 1, period: '1h' },
    });
    await rulesReached(gateway);
    const victim = (await cluster.topology()).find((node) => node.role === 'master')!;

    const running = load(
      [gateway],
      7_000,
      4,
      () => '/failover/x',
      (i) => ({ 'x-client': `c${i % 50}` }),
    );
    await sleep(1_000);
    await cluster.kill(victim.port);
    const result = await running;
    const fallbacks = await metric(gateway, 'sluice_store_fallbacks_total', { policy: 'local' });
    const summary = JSON.stringify({ ...result, fallbacks });
    expect(result.other, summary).toBe(0);
    expect(result.denied, summary).toBe(0);
    // the dead master's clients were decided locally meanwhile
    expect(fallbacks, summary).toBeGreaterThan(0);

    await cluster.waitHealthy(15_000);
    // every new client's key lands in Redis again, including those of the failed-over slots
    await waitFor(
      async () => {
        const before = await metric(gateway, 'sluice_store_fallbacks_total', { policy: 'local' });
        for (let i = 0; i < 20; i++) {
          await http(gateway.port, '/failover/x', { headers: { 'x-client': `after-${i}` } });
        }
        return (await metric(gateway, 'sluice_store_fallbacks_total', { policy: 'local' })) === before;
      },
      15_000,
      'decisions on Redis again',
    );
    for (let i = 0; i < 20; i++) {
      expect(await admin.exists(`${PREFIX}{${rule.id}:header:after-${i}}`)).toBe(1);
    }
  }, 45_000);
});
