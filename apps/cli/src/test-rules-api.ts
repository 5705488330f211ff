/**
 * Test helper: a real rules API process (from source, as `pnpm rules` runs the CLI) on a free port,
 * backed by a Postgres database of its own that is dropped afterwards, so test files run in parallel.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const ADMIN_DATABASE_URL =
  process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestRulesApi {
  url: string;
  adminToken: string;
  readToken: string;
  /** every line the process printed */
  output: string[];
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function startRulesApi(): Promise<TestRulesApi> {
  const database = `sluice_cli_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${database}`));
  const databaseUrl = new URL(ADMIN_DATABASE_URL);
  databaseUrl.pathname = `/${database}`;
  const port = await freePort();
  const adminToken = `admin-${randomBytes(8).toString('hex')}`;
  const readToken = `read-${randomBytes(8).toString('hex')}`;
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
        DATABASE_URL: databaseUrl.toString(),
        ADMIN_TOKEN: adminToken,
        READ_TOKEN: readToken,
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  child.stdout!.on('data', (d: Buffer) => output.push(d.toString()));
  child.stderr!.on('data', (d: Buffer) => output.push(d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;

  const stop = async () => {
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(10_000).then(() => child.kill('SIGKILL'))]);
    await admin((c) => c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
  };

  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`rules API exited with ${child.exitCode}:\n${output.join('')}`);
    }
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`rules API not ready after 30 s:\n${output.join('')}`);
    }
    await sleep(100);
  }
  return { url, adminToken, readToken, output, stop };
}
