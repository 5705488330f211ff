/**
 * A second front door, built from @sluice/engine alone: no Fastify, no `node:http`. Facts in (as an
 * RPC or a JSON API would hand them over), a decision out, on the same Redis store, failure policy
 * and rules source as the gateway's. It shows the engine is enough for a front door that is not the
 * HTTP proxy (Envoy's rate limit service, a decision API), and that two front doors on one store
 * share one limit.
 */
import { randomUUID } from 'node:crypto';
import { createEngine, type Engine, type EngineConfig, type EngineLogger, StaticRules } from '@sluice/engine';
import { type Decision, type RequestFacts, storedRule } from '@sluice/shared';
import { afterEach, describe, expect, it } from 'vitest';

const logger: EngineLogger = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

function config(prefix: string): EngineConfig {
  return {
    rulesApiUrl: 'http://127.0.0.1:1',
    rulesApiToken: undefined,
    rulesRefresh: '*/5 * * * * *',
    rulesFetchTimeoutMs: 1_000,
    redisUrl: 'redis://127.0.0.1:6379',
    redisClusterNodes: undefined,
    redisKeyPrefix: prefix,
    storeFailure: 'closed',
    storeTimeoutMs: 500,
    denialCacheSize: 0,
    leaseMs: 0,
    localStoreMaxKeys: 10_000,
    slotLeaseMs: 30_000,
    jwt: undefined,
    clientKeySecret: 'second-front-door-test',
  };
}

const rule = storedRule({
  name: 'orders',
  match: { path: '/orders/**' },
  client: { by: 'header', name: 'x-api-key' },
  limit: { capacity: 3, refill: 1, period: '1h' },
});

/** What a non-HTTP front door knows of a call: a method, a path, some metadata. */
function facts(path: string, apiKey: string): RequestFacts {
  const headers: Record<string, string> = { 'x-api-key': apiKey };
  return {
    method: 'GET',
    host: undefined,
    path,
    header: (name) => (headers[name] === undefined ? undefined : [headers[name]!]),
    joinedHeader: (name) => headers[name],
    clientIp: () => '192.0.2.7',
  };
}

/** The front door's whole job: facts in, a verdict out, the exchange ended when the call is. */
async function shouldLimit(engine: Engine, call: RequestFacts): Promise<'OK' | 'OVER_LIMIT' | 'UNKNOWN'> {
  const decision: Decision = await engine.core.decide(call);
  if (decision.kind !== 'limited') return decision.kind === 'no-rule' ? 'UNKNOWN' : 'OK';
  decision.exchange?.end();
  return decision.refused ? 'OVER_LIMIT' : 'OK';
}

const engines: Engine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((engine) => engine.close()));
});

async function started(prefix: string): Promise<Engine> {
  const engine = createEngine(config(prefix), { logger, rules: new StaticRules([rule]), heartbeatMs: 0 });
  engines.push(engine);
  await engine.start();
  await engine.ready();
  return engine;
}

describe('a second front door from @sluice/engine alone', () => {
  it('decides on the rules and the Redis store the configuration names', async () => {
    const engine = await started(`test:engine:${randomUUID()}:`);
    const verdicts = [];
    for (let i = 0; i < 5; i++) verdicts.push(await shouldLimit(engine, facts('/orders/1', 'alice')));
    expect(verdicts).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
    // another client has its own bucket; a path no rule names is no rule's
    expect(await shouldLimit(engine, facts('/orders/1', 'bob'))).toBe('OK');
    expect(await shouldLimit(engine, facts('/health', 'alice'))).toBe('UNKNOWN');
    expect(await shouldLimit(engine, facts('/orders', 'alice'))).toBe('OVER_LIMIT');
    // the bucket is in Redis: usage reads it back, empty for alice, two left for bob
    const plan = engine.core.planOf(engine.rules.current!.compiled.rules[0]!);
    const { usageOfClient } = await import('@sluice/engine');
    const alice = await usageOfClient(plan, 'orders', 'header:alice', engine.core.secretKeys, engine.peek);
    const bob = await usageOfClient(plan, 'orders', 'header:bob', engine.core.secretKeys, engine.peek);
    expect([alice.limits[0]?.remaining, bob.limits[0]?.remaining]).toEqual([0, 2]);
  });

  it('shares one limit with another engine on the same store', async () => {
    const prefix = `test:engine:${randomUUID()}:`;
    const [first, second] = [await started(prefix), await started(prefix)];
    const verdicts = [];
    for (let i = 0; i < 4; i++)
      verdicts.push(await shouldLimit(i % 2 ? second : first, facts('/orders', 'carol')));
    expect(verdicts).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
  });

  it('answers by its failure policy when the store cannot be reached', async () => {
    const engine = createEngine(
      { ...config(`test:engine:${randomUUID()}:`), redisUrl: 'redis://127.0.0.1:1' },
      { logger, rules: new StaticRules([rule]), heartbeatMs: 0, offendersFlushMs: 0 },
    );
    engines.push(engine);
    await engine.start();
    const decision = await engine.core.decide(facts('/orders', 'dave'));
    expect(decision.kind).toBe('unavailable');
  });
});
