/**
 * `@sluice/shared/redis`: the Redis limiter store, analytics on Redis, and the one Redis client
 * factory both use. A subpath of its own so that the root entry (the rules API and the CLI import it)
 * never loads ioredis.
 */

export * from './analytics/offenders-redis.js';
export { type HostPort, parseHostPort } from './config/host-port.js';
export { ACQUIRE_FUNCTION, ACQUIRE_LIBRARY_NAME } from './limiter/acquire-script.js';
export * from './limiter/peek-redis.js';
export { MAX_BATCH_KEYS, MAX_BATCH_REQUESTS } from './limiter/redis/batching.js';
export {
  type ClusterSeeds,
  createRedisClient,
  type RedisClient,
  type RedisClientOptions,
  type RedisTarget,
} from './limiter/redis/client.js';
export type { ScriptMode } from './limiter/redis/function-library.js';
export { ACQUIRE_COMMAND, type AcquireReply } from './limiter/redis/script.js';
export * from './limiter/redis-store.js';
