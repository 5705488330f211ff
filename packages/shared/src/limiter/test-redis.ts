/** Test helper: a RedisStore and an admin client on the real Redis, under a key prefix of the caller's own. */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisStore } from './redis-store.js';

export const REDIS_URL = 'redis://127.0.0.1:6379';

export interface TestRedis {
  store: RedisStore;
  admin: Redis;
  prefix: string;
  /** deletes every key under the prefix and closes both clients */
  close(): Promise<void>;
}

export async function openTestRedis(name: string): Promise<TestRedis> {
  const prefix = `test:${name}:${randomUUID()}:`;
  const store = new RedisStore(REDIS_URL, { keyPrefix: prefix, commandTimeoutMs: 5_000 });
  const admin = new Redis(REDIS_URL);
  await store.ready();
  return {
    store,
    admin,
    prefix,
    async close() {
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1_000);
        if (keys.length) await admin.del(...keys);
        cursor = next;
      } while (cursor !== '0');
      await store.close();
      await admin.quit();
    },
  };
}
