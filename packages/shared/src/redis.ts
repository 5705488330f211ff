/**
 * `@sluice/shared/redis`: the Redis limiter store. A subpath of its own so that the root entry (the
 * rules API and the CLI import it) never loads ioredis.
 */

export * from './analytics/offenders-redis.js';
export * from './limiter/peek-redis.js';
export * from './limiter/redis-store.js';
