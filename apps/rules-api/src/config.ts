/**
 * The rules API's environment (SPEC §1), validated once at start. `loadConfig` either returns a
 * complete typed config or throws one `ConfigError` listing one line per bad variable.
 */

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Config {
  port: number;
  host: string;
  /** `postgres://…`; undefined → embedded PGlite under `dataDir` */
  databaseUrl: string | undefined;
  /** where PGlite keeps its files (`<dataDir>/rules-db`); `memory://` keeps them in memory */
  dataDir: string;
  /** undefined only when `authDisabled` */
  adminToken: string | undefined;
  readToken: string | undefined;
  authDisabled: boolean;
  logLevel: LogLevel;
  /** largest accepted request body, bytes */
  bodyLimitBytes: number;
  /** how long a replica trusts its cached rule-set version before asking the database again, ms */
  snapshotCacheMs: number;
  /** connect timeout and per-query bound for the database, ms (readiness answers within this) */
  dbTimeoutMs: number;
  /** overrides where the SQL migrations are read from (default: `migrations/` at the repo root) */
  migrationsDir: string | undefined;
}

export class ConfigError extends Error {
  readonly code = 'SLUICE_CONFIG_INVALID';
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/** Reads `env` (usually `process.env`); empty strings count as unset, as docker-compose writes them. */
export function loadConfig(env: Env): Config {
  const problems: string[] = [];
  const get = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };

  const integer = (name: string, fallback: number, min: number, max: number): number => {
    const raw = get(name);
    if (raw === undefined) return fallback;
    if (!/^[0-9]+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
      problems.push(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
      return fallback;
    }
    return Number(raw);
  };

  const boolean = (name: string): boolean => {
    const raw = get(name)?.toLowerCase();
    if (raw === undefined || raw === 'false' || raw === '0') return false;
    if (raw === 'true' || raw === '1') return true;
    problems.push(`${name} must be true or false, got ${JSON.stringify(get(name))}`);
    return false;
  };

  const port = integer('PORT', 8081, 0, 65535);
  const host = get('HOST') ?? '0.0.0.0';

  const databaseUrl = get('DATABASE_URL');
  if (databaseUrl !== undefined) {
    // Never echo the URL: it usually carries a password.
    let parsed: URL | undefined;
    try {
      parsed = new URL(databaseUrl);
    } catch {
      problems.push(
        'DATABASE_URL must be a URL like postgres://user:password@host:5432/db (it could not be parsed)',
      );
    }
    if (parsed && parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
      problems.push(
        `DATABASE_URL must start with postgres:// or postgresql://, got scheme ${JSON.stringify(parsed.protocol)}`,
      );
    } else if (parsed && parsed.hostname === '' && !parsed.searchParams.has('host')) {
      problems.push('DATABASE_URL must name a host, e.g. postgres://user:password@host:5432/db');
    }
  }

  const authDisabled = boolean('AUTH_DISABLED');
  const adminToken = get('ADMIN_TOKEN');
  const readToken = get('READ_TOKEN');
  if (adminToken === undefined && !authDisabled) {
    problems.push('ADMIN_TOKEN is required (or set AUTH_DISABLED=true to run without authentication)');
  }
  for (const [name, token] of [
    ['ADMIN_TOKEN', adminToken],
    ['READ_TOKEN', readToken],
  ] as const) {
    // A bearer token travels in one header value: printable ASCII without spaces (RFC 6750 b64token-ish).
    if (token !== undefined && !/^[\x21-\x7e]+$/.test(token)) {
      problems.push(`${name} must be printable ASCII without spaces`);
    }
  }
  if (readToken !== undefined && readToken === adminToken) {
    problems.push('READ_TOKEN must differ from ADMIN_TOKEN');
  }

  const rawLevel = get('LOG_LEVEL') ?? 'info';
  let logLevel: LogLevel = 'info';
  if ((LOG_LEVELS as readonly string[]).includes(rawLevel)) logLevel = rawLevel as LogLevel;
  else problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(rawLevel)}`);

  const bodyLimitBytes = integer('BODY_LIMIT_BYTES', 64 * 1024, 1024, 16 * 1024 * 1024);
  const snapshotCacheMs = integer('SNAPSHOT_CACHE_MS', 500, 0, 10_000);
  const dbTimeoutMs = integer('DB_TIMEOUT_MS', 2_000, 100, 60_000);

  if (problems.length > 0) throw new ConfigError(problems);
  return {
    port,
    host,
    databaseUrl,
    dataDir: get('DATA_DIR') ?? './.data',
    adminToken: authDisabled ? undefined : adminToken,
    readToken: authDisabled ? undefined : readToken,
    authDisabled,
    logLevel,
    bodyLimitBytes,
    snapshotCacheMs,
    dbTimeoutMs,
    migrationsDir: get('MIGRATIONS_DIR'),
  };
}
