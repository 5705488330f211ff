/**
 * A real rules API process, started from source the way `pnpm rules` and the tests run the apps, on a
 * port of its own and a fresh Postgres database of its own (dropped at stop), so test files run in parallel.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { freePort, sleep } from './ports.js';
import { createTestDatabase } from './postgres.js';

/** The repository root, ending in `/` (this file is packages/test-support/{src,dist}/rules-api.*). */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const READY_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;

export interface StartRulesApiOptions {
  /** listen there (a test that starts a gateway before its rules API picks it first); default: a free port */
  port?: number;
  /** default: random */
  adminToken?: string;
  /** default: random */
  readToken?: string;
  /** more environment for the process, e.g. `SNAPSHOT_CACHE_MS` */
  env?: Record<string, string>;
  /** prefix of its database's name */
  databasePrefix?: string;
}

export interface TestRulesApi {
  url: string;
  adminToken: string;
  readToken: string;
  /** every chunk the process printed on stdout and stderr */
  output: string[];
  /** SIGKILLs the process if alive (the database stays) */
  kill(): Promise<void>;
  /** SIGTERMs the process (SIGKILL after 10 s) and drops its database */
  stop(): Promise<void>;
}

export async function startRulesApi(options: StartRulesApiOptions = {}): Promise<TestRulesApi> {
  const database = await createTestDatabase(options.databasePrefix ?? 'sluice_rules_api');
  const port = options.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const adminToken = options.adminToken ?? `admin-${randomBytes(8).toString('hex')}`;
  const readToken = options.readToken ?? `read-${randomBytes(8).toString('hex')}`;
  const output: string[] = [];
  const child: ChildProcess = spawn(
    process.execPath,
    ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'],
    {
      cwd: `${REPO_ROOT}apps/rules-api`,
      env: {
        ...process.env,
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: database.url,
        ADMIN_TOKEN: adminToken,
        READ_TOKEN: readToken,
        LOG_LEVEL: 'warn',
        ...options.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  child.stdout!.on('data', (d: Buffer) => output.push(d.toString()));
  child.stderr!.on('data', (d: Buffer) => output.push(d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const alive = () => child.exitCode === null && child.signalCode === null;

  const kill = async () => {
    if (alive()) child.kill('SIGKILL');
    await exited;
  };
  const stop = async () => {
    if (alive()) child.kill('SIGTERM');
    const escalate = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    await exited;
    clearTimeout(escalate);
    await database.drop();
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (!alive()) {
      await stop();
      throw new Error(`rules API exited with ${child.exitCode ?? child.signalCode}:\n${output.join('')}`);
    }
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`rules API not ready after ${READY_TIMEOUT_MS} ms:\n${output.join('')}`);
    }
    await sleep(100);
  }
  return { url, adminToken, readToken, output, kill, stop };
}
