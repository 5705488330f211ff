/**
 * A real rules API process on a fresh Postgres database of its own (dropped at close), started the
 * way operators start it (node + the rules API's server.ts), plus a tiny REST client for its rules.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort, waitFor } from './ports.js';

const run = promisify(execFile);
const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const PG = ['-h', '127.0.0.1', '-p', '5432', '-U', 'postgres', '-v', 'ON_ERROR_STOP=1', '-q'];

export const ADMIN_TOKEN = 'gateway-test-admin-token';
export const READ_TOKEN = 'gateway-test-read-token';

export interface RuleBody {
  name: string;
  match: { path: string; methods?: string[]; host?: string };
  client?: { by: 'ip' | 'global' } | { by: 'header'; name: string };
  limit: { capacity: number; refill: number; period: string | number };
  cost?: number;
  maxDebt?: number;
  enabled?: boolean;
  shadow?: boolean;
  priority?: number;
}

export interface StoredRule extends RuleBody {
  id: string;
  version: number;
}

export interface RulesApi {
  url: string;
  createRule(body: RuleBody): Promise<StoredRule>;
  updateRule(id: string, body: RuleBody): Promise<StoredRule>;
  deleteRule(id: string): Promise<void>;
  snapshotVersion(): Promise<number>;
  /** SIGKILLs the process (the database stays) */
  kill(): Promise<void>;
  /** kills the process if alive and drops the database */
  close(): Promise<void>;
}

/** `port`: listen there (a test that starts a gateway before its rules API picks it first). */
export async function startRulesApi(options: { port?: number } = {}): Promise<RulesApi> {
  const database = `gw_test_${randomBytes(6).toString('hex')}`;
  await run('psql', [...PG, '-d', 'postgres', '-c', `CREATE DATABASE ${database}`]);
  const port = options.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    process.execPath,
    ['--conditions=sluice-source', '--import', 'tsx', 'apps/rules-api/src/server.ts'],
    {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${database}`,
        ADMIN_TOKEN,
        READ_TOKEN,
        LOG_LEVEL: 'warn',
        SNAPSHOT_CACHE_MS: '0',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exit.then(() => {
    exited = true;
  });
  try {
    await waitFor(
      async () => {
        if (exited) throw new Error(`rules API exited: ${stderr}`);
        return (await fetch(`${url}/readyz`)).status === 200;
      },
      30_000,
      'the rules API to be ready',
    );
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${(error as Error).message}\n${stderr}`);
  }

  const call = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status >= 300)
      throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
    return response;
  };

  const kill = async () => {
    if (!exited) {
      child.kill('SIGKILL');
      await exit;
    }
  };

  return {
    url,
    createRule: async (body) => (await (await call('POST', '/rules', body)).json()) as StoredRule,
    updateRule: async (id, body) => (await (await call('PUT', `/rules/${id}`, body)).json()) as StoredRule,
    deleteRule: async (id) => {
      await call('DELETE', `/rules/${id}`);
    },
    snapshotVersion: async () =>
      ((await (await call('GET', '/rules/snapshot')).json()) as { version: number }).version,
    kill,
    close: async () => {
      await kill();
      await run('psql', [...PG, '-d', 'postgres', '-c', `DROP DATABASE IF EXISTS ${database} WITH (FORCE)`]);
    },
  };
}
