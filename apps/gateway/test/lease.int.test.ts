/**
 * Lease mode on the real Redis through real gateways: two gateways on one global key under paced load
 * never admit more than exact mode's bound, cost far fewer Redis calls than requests, and a gateway
 * stopped by SIGTERM gives its unused lease tokens back.
 */
import type { ChildProcess } from 'node:child_process';
import { Agent } from 'node:http';
import { sleep, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  metricValue,
  type RunningGateway,
  spawnGatewayProcess,
  startGateway,
  uniqueKeyPrefix,
} from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RuleBody, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const REDIS_URL = 'redis://127.0.0.1:6379';

let api: RulesApi;
let upstream: Upstream;
let one: RunningGateway;
let two: RunningGateway;
let redis: Redis;
const prefix = uniqueKeyPrefix('lease');
const children: ChildProcess[] = [];
const agent = new Agent({ keepAlive: true, maxSockets: 16 });

/** A rule in lease mode on one global token bucket. */
function leaseRule(name: string, capacity: number, refill: number, period: string): RuleBody {
  return {
    name,
    match: { path: `/${name}/**` },
    client: { by: 'global' },
    limit: { capacity, refill, period },
    maxDebt: 0,
    mode: 'lease',
  } as RuleBody;
}

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  await api.createRule(leaseRule('hot', 40, 20, '1s'));
  await api.createRule(leaseRule('roomy', 100_000, 100_000, '1s'));
  await api.createRule(leaseRule('stop', 1_000, 1, '1h'));
  const env = {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    LEASE_MS: '100',
  };
  [one, two] = await Promise.all([startGateway(env), startGateway(env)]);
  redis = new Redis(REDIS_URL);
}, 60_000);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await Promise.all([one?.close(), two?.close()]);
  await Promise.all([api?.close(), upstream?.close()]);
  redis?.disconnect();
  agent.destroy();
});

/** Paced load: every `gapMs` one request to each gateway, for `durationMs`; the statuses seen. */
async function pacedLoad(path: string, gateways: RunningGateway[], durationMs: number, gapMs: number) {
  const statuses: number[] = [];
  const pending: Promise<void>[] = [];
  const startedAt = performance.now();
  while (performance.now() - startedAt < durationMs) {
    for (const gateway of gateways) {
      pending.push(http(gateway.port, path, { agent }).then((answer) => void statuses.push(answer.status)));
    }
    await sleep(gapMs);
  }
  await Promise.all(pending);
  return { statuses, elapsedMs: performance.now() - startedAt };
}

async function storeCalls(gateway: RunningGateway): Promise<number> {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text();
  const acquire = metricValue(text, 'sluice_store_calls_total', { op: 'acquire' });
  const settle = metricValue(text, 'sluice_store_calls_total', { op: 'settle' });
  return (Number.isNaN(acquire) ? 0 : acquire) + (Number.isNaN(settle) ? 0 : settle);
}

describe('lease mode on the real Redis, two gateways, one key', () => {
  it('never admits more than capacity + rate·T under paced load above the limit', async () => {
    const { statuses, elapsedMs } = await pacedLoad('/hot/x', [one, two], 2_000, 5);
    const admitted = statuses.filter((status) => status === 200).length;
    const denied = statuses.filter((status) => status === 429).length;
    expect(admitted + denied).toBe(statuses.length);
    const bound = 40 + (20 * elapsedMs) / 1000;
    expect(admitted).toBeLessThanOrEqual(bound);
    // under-admission is bounded by the tokens parked in leases (at most a quarter of capacity each)
    expect(admitted).toBeGreaterThanOrEqual(bound - 2 * 10 - 2);

    // the bucket is short now: a lease-mode denial has exact mode's 429 and headers (what accrued
    // since the load may still be in a lease: the first few requests may pass)
    let denial = await http(one.port, '/hot/x', { agent });
    for (let i = 0; i < 20 && denial.status !== 429; i++) denial = await http(one.port, '/hot/x', { agent });
    expect(denial.status).toBe(429);
    expect(Number(denial.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(denial.json()).toMatchObject({ rule: 'hot' });
    expect(denial.headers['ratelimit-policy']).toBe('"hot";q=40;w=2');
    expect(denial.headers.ratelimit).toMatch(/^"hot";r=0;t=\d+$/);
    // draft-11: t never exceeds Retry-After (a lease at its limit waits for the next lease, not longer)
    const t = Number(/;t=(\d+)/.exec(String(denial.headers.ratelimit))![1]);
    expect(t).toBeGreaterThanOrEqual(1);
    expect(t).toBeLessThanOrEqual(Number(denial.headers['retry-after']));
  }, 30_000);

  it('under the limit: everything admitted with far fewer Redis calls than requests', async () => {
    const before = (await storeCalls(one)) + (await storeCalls(two));
    const { statuses } = await pacedLoad('/roomy/x', [one, two], 1_500, 2);
    const calls = (await storeCalls(one)) + (await storeCalls(two)) - before;
    expect(statuses.every((status) => status === 200)).toBe(true);
    // an answer from a lease carries the same headers
    const answer = await http(two.port, '/roomy/x', { agent });
    expect(answer.headers['ratelimit-policy']).toBe('"roomy";q=100000;w=1');
    expect(answer.headers.ratelimit).toMatch(/^"roomy";r=\d+;t=\d+$/);
    expect(calls / statuses.length).toBeLessThan(0.25);
    // the gateway that just answered from a lease holds tokens; LEASE_MS (100 ms) after its last
    // request it has given every one back. A busy machine can stall longer than that between an
    // answer and the metrics read, so the read follows a fresh answer a few times over.
    let held = 0;
    for (let attempt = 0; attempt < 5 && held === 0; attempt++) {
      await http(two.port, '/roomy/x', { agent });
      held = metricValue(
        await (await fetch(`${two.adminUrl}/metrics`)).text(),
        'sluice_lease_tokens_outstanding',
      );
    }
    expect(held).toBeGreaterThan(0);
    // LEASE_MS after its last request the gateway gives them back by itself
    await waitFor(
      async () =>
        metricValue(
          await (await fetch(`${two.adminUrl}/metrics`)).text(),
          'sluice_lease_tokens_outstanding',
        ) === 0,
      5_000,
      'the lease tokens given back',
    );
  }, 30_000);

  it('a gateway stopped by SIGTERM gives its unused lease tokens back to the bucket', async () => {
    const { child, port } = await spawnGatewayProcess({
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      REDIS_URL,
      REDIS_KEY_PREFIX: prefix,
      // leases outlive the test: only the shutdown can give them back
      LEASE_MS: '60000',
    });
    children.push(child);
    let admitted = 0;
    for (let i = 0; i < 40; i++) {
      if ((await http(port, '/stop/x', { agent })).status === 200) admitted++;
      await sleep(2);
    }
    expect(admitted).toBe(40);
    const balance = async () => {
      // only the buckets: the gateways also flush top offenders (sorted sets) under the same prefix
      const all = await redis.keys(`${prefix}*`);
      const types = await Promise.all(all.map((k) => redis.type(k)));
      const keys = all.filter((_, i) => types[i] === 'string');
      const values = await Promise.all(keys.map((k) => redis.get(k)));
      // a bucket is "<balance> <updatedAtMs>"; the one of rule "stop" is the only one near 1000
      const levels = values.map((v) => Number(String(v).split(' ')[0])).filter((b) => b > 500);
      expect(levels).toHaveLength(1);
      return levels[0]!;
    };
    const held = await balance();
    // a lease holds more than was admitted (up to a quarter of capacity)
    expect(held).toBeLessThan(1_000 - admitted - 10);
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    const after = await balance();
    // admitted plus returned = taken: the level is what the admitted requests left (refill is 1/h)
    expect(after).toBeGreaterThanOrEqual(1_000 - admitted);
    expect(after).toBeLessThan(1_000 - admitted + 0.1);
  }, 60_000);
});
