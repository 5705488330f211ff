/**
 * The store the engine's limits live in: Redis or a Redis Cluster (REDIS_URL, REDIS_CLUSTER_NODES),
 * or, without either, an in-process store (one gateway only, said loudly in the log). Connection
 * changes are logged once each, never per request.
 */
import { MemoryStore, type Store } from '@sluice/shared';
import { RedisStore } from '@sluice/shared/redis';
import type { EngineConfig } from './config.js';
import type { EngineLogger } from './telemetry.js';

export function createPrimaryStore(config: EngineConfig, log: EngineLogger): Store {
  if (config.redisUrl === undefined && config.redisClusterNodes === undefined) {
    log.warn(
      'REDIS_URL is not set: limits are kept in this process only. Each gateway replica enforces its own ' +
        'limits (N replicas admit N times the limit). Set REDIS_URL to share them.',
    );
    return new MemoryStore({ maxKeys: config.localStoreMaxKeys });
  }
  const cluster = config.redisClusterNodes !== undefined;
  const what = cluster ? 'the Redis Cluster' : 'Redis';
  const store = new RedisStore(
    config.redisClusterNodes ? { clusterNodes: config.redisClusterNodes } : config.redisUrl!,
    {
      keyPrefix: config.redisKeyPrefix,
      commandTimeoutMs: config.storeTimeoutMs,
      coalesceWrites: true,
      onGiveBackFailure: (error) =>
        log.warn(
          { err: error },
          'could not give back a cross-slot charge: the limit stays charged until it refills',
        ),
    },
  );
  let connected = false;
  store.client.on('ready', () => {
    connected = true;
    log.info(`connected to ${what}`);
  });
  store.client.on(cluster ? 'end' : 'close', () => {
    if (!connected) return;
    connected = false;
    log.warn(`lost the connection to ${what}; reconnecting`);
  });
  if (cluster) {
    // a node lost or a slot moved: ioredis follows; say so once per change, not per request
    store.client.on('+node', (node: { options?: { host?: string; port?: number } }) =>
      log.info(`Redis Cluster node ${node.options?.host}:${node.options?.port} joined`),
    );
    store.client.on('-node', (node: { options?: { host?: string; port?: number } }) =>
      log.warn(`Redis Cluster node ${node.options?.host}:${node.options?.port} left`),
    );
  }
  return store;
}
