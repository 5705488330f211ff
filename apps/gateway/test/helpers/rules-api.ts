/**
 * A real rules API process on a fresh Postgres database of its own (dropped at close), with the
 * gateway tests' fixed tokens, plus a tiny REST client for its rules.
 */
import { startRulesApi as startRulesApiProcess } from '@sluice/test-support';

export const ADMIN_TOKEN = 'gateway-test-admin-token';
export const READ_TOKEN = 'gateway-test-read-token';

export interface RuleBody {
  name: string;
  match: { path: string; methods?: string[]; host?: string; caseInsensitive?: boolean };
  client?:
    | { by: 'ip' | 'global' }
    | { by: 'header'; name: string; secret?: boolean }
    | { by: 'jwt'; claim?: string };
  limit: { capacity: number; refill: number; period: string | number };
  cost?: number;
  maxDebt?: number;
  enabled?: boolean;
  shadow?: boolean;
  priority?: number;
}

/** A rule in format v2 (`limits`, conditions, `unlimited`), as tests write it. */
export interface RuleBodyV2 {
  name: string;
  match: {
    path: string;
    methods?: string[];
    host?: string;
    headers?: Record<string, string>;
    clientIps?: string[];
    notClientIps?: string[];
  };
  limits?: (
    | {
        name: string;
        client?: RuleBody['client'];
        algorithm?: 'token-bucket';
        capacity: number;
        refill: number;
        period: string | number;
        maxDebt?: number;
        cost?: number;
      }
    | {
        name: string;
        client?: RuleBody['client'];
        algorithm: 'sliding-window';
        max: number;
        window: string | number;
        cost?: number;
      }
  )[];
  unlimited?: boolean;
  cost?: number;
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
  createRule(body: RuleBody | RuleBodyV2): Promise<StoredRule>;
  updateRule(id: string, body: RuleBody): Promise<StoredRule>;
  deleteRule(id: string): Promise<void>;
  snapshotVersion(): Promise<number>;
  /** SIGKILLs the process (the database stays) */
  kill(): Promise<void>;
  /** kills the process if alive and drops the database */
  close(): Promise<void>;
}

/** `port`: listen there (a test that starts a gateway before its rules API picks it first). */
export async function startRulesApi(
  options: { port?: number; env?: Record<string, string> } = {},
): Promise<RulesApi> {
  const api = await startRulesApiProcess({
    port: options.port,
    adminToken: ADMIN_TOKEN,
    readToken: READ_TOKEN,
    env: { SNAPSHOT_CACHE_MS: '0', ...options.env },
    databasePrefix: 'gw_test',
  });

  const call = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const response = await fetch(`${api.url}${path}`, {
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

  return {
    url: api.url,
    createRule: async (body) => (await (await call('POST', '/rules', body)).json()) as StoredRule,
    updateRule: async (id, body) => (await (await call('PUT', `/rules/${id}`, body)).json()) as StoredRule,
    deleteRule: async (id) => {
      await call('DELETE', `/rules/${id}`);
    },
    snapshotVersion: async () =>
      ((await (await call('GET', '/rules/snapshot')).json()) as { version: number }).version,
    kill: api.kill,
    close: async () => {
      await api.kill();
      await api.stop();
    },
  };
}
