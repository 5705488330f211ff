/** A gateway built in-process the way server.ts builds it, on port 0, with a fast rules refresh. */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { buildGateway, type Gateway, type GatewayDeps } from '../../src/app.js';
import { loadConfig } from '../../src/config/config.js';

export interface RunningGateway {
  gateway: Gateway;
  url: string;
  port: number;
  adminUrl: string;
  /**
   * Resolves once every exchange opened so far has ended and its settlements are in the store (slots
   * back, costs charged or refunded): what a test awaits before reading the settled state.
   */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/** A Redis key prefix no other test file uses. */
export function uniqueKeyPrefix(name: string): string {
  return `sluice-test:${name}:${randomBytes(4).toString('hex')}:`;
}

export async function startGateway(
  env: Record<string, string | undefined>,
  deps: GatewayDeps = {},
  options: { waitReady?: boolean } = {},
): Promise<RunningGateway> {
  const config = loadConfig({
    PORT: '0',
    ADMIN_PORT: '0',
    HOST: '127.0.0.1',
    RULES_REFRESH: '* * * * * *',
    LOG_LEVEL: process.env.GATEWAY_TEST_LOG ?? 'silent',
    ...env,
  });
  const gateway = buildGateway(config, {
    defaultMetrics: false,
    ...deps,
  });
  const { proxyUrl, adminUrl } = await gateway.start();
  if (options.waitReady !== false) await gateway.ready();
  return {
    gateway,
    url: proxyUrl,
    port: Number(new URL(proxyUrl).port),
    adminUrl,
    settled: () => gateway.limiter.core.settled(),
    close: async () => {
      await gateway.close();
      if (config.redisUrl && config.redisKeyPrefix.startsWith('sluice-test:')) {
        await deleteKeys(config.redisUrl, config.redisKeyPrefix).catch(() => {});
      }
    },
  };
}

/** The value of one sample of `/metrics`, e.g. metricValue(text, 'sluice_requests_total', { rule: 'a', decision: 'denied' }). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== ' ' && rest[0] !== '{') continue;
    const ok = Object.entries(labels).every(([k, v]) => rest.includes(`${k}="${v}"`));
    if (ok) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return Number.NaN;
}

/** Removes what a test left in a shared Redis (buckets expire by themselves, but up to an hour later). */
async function deleteKeys(redisUrl: string, prefix: string): Promise<void> {
  const client = new Redis(redisUrl, { lazyConnect: true, connectTimeout: 500, maxRetriesPerRequest: 0 });
  try {
    await client.connect();
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
  } finally {
    client.disconnect();
  }
}

export interface GatewayProcess {
  readonly child: ChildProcess;
  readonly port: number;
  readonly adminPort: number;
}

/**
 * A gateway in a process of its own (from source), for tests that kill it (SIGKILL, SIGTERM): listens
 * on free ports with `env` on top of a minimal environment, resolves once `/readyz` answers 200.
 */
export async function spawnGatewayProcess(env: Record<string, string>): Promise<GatewayProcess> {
  const [port, adminPort] = [await freePort(), await freePort()];
  const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'], {
    cwd: fileURLToPath(new URL('../../', import.meta.url)),
    env: {
      PATH: process.env.PATH ?? '',
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      ...env,
    },
    stdio: 'ignore',
  });
  try {
    await waitFor(
      async () =>
        (await fetch(`http://127.0.0.1:${adminPort}/readyz`).catch(() => undefined))?.status === 200,
      30_000,
      'the spawned gateway',
    );
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return { child, port, adminPort };
}
