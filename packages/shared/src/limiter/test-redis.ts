/**
 * Test helpers: a RedisStore and an admin client on the real Redis, under a key prefix of the caller's
 * own; a redis-server of a test's own, on a free port.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { RedisStore } from './redis-store.js';
import { SimulatedClock } from './test-clock.js';

/** A TCP port nothing listens on now, on 127.0.0.1 (one helper for every test: @sluice/test-support). */
export { freePort } from '@sluice/test-support';

export const REDIS_URL = 'redis://127.0.0.1:6379';

/** A store on a simulated clock, and the clock: `await clock.at(ms, () => store.acquire(checks))`. */
export interface SimulatedRedis {
  store: RedisStore;
  clock: SimulatedClock;
}

export interface TestRedis {
  /** on Redis TIME */
  store: RedisStore;
  admin: Redis;
  prefix: string;
  /**
   * A store on `store`'s connection and prefix whose clock the test walks. `minTtlMs` keeps its keys
   * at least that long in real time (`SIMULATION_TTL_MS` for a long simulation); default 0.
   */
  simulated(options?: { minTtlMs?: number }): SimulatedRedis;
  /** deletes every key under the prefix and closes every client */
  close(): Promise<void>;
}

export async function openTestRedis(name: string): Promise<TestRedis> {
  const prefix = `test:${name}:${randomUUID()}:`;
  const store = new RedisStore(REDIS_URL, { keyPrefix: prefix, commandTimeoutMs: 5_000 });
  const admin = new Redis(REDIS_URL);
  const simulatedStores: RedisStore[] = [];
  await store.ready();
  return {
    store,
    admin,
    prefix,
    simulated(options = {}) {
      const clock = new SimulatedClock();
      const simulated = new RedisStore(store.client, {
        keyPrefix: prefix,
        now: clock.now,
        minTtlMs: options.minTtlMs ?? 0,
      });
      simulatedStores.push(simulated);
      return { store: simulated, clock };
    },
    async close() {
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1_000);
        if (keys.length) await admin.del(...keys);
        cursor = next;
      } while (cursor !== '0');
      await Promise.all(simulatedStores.map((simulated) => simulated.close()));
      await store.close();
      await admin.quit();
    },
  };
}

/** A redis-server of a test's own on `port` (with `options` on its command line), once it answers. */
export async function startOwnRedis(port: number, ...options: string[]): Promise<ChildProcess> {
  const server = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...options],
    { stdio: 'ignore' },
  );
  const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: 0 });
  probe.on('error', () => {});
  for (let i = 0; i < 100; i++) {
    try {
      if (probe.status === 'wait') await probe.connect();
      if ((await probe.ping()) === 'PONG') break;
    } catch {
      await sleep(50);
    }
  }
  probe.disconnect();
  return server;
}
