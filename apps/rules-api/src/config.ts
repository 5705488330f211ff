/**
 * The rules API's environment, validated once at start (docs/configuration.md). Every variable is
 * declared once in `RULES_API_ENV`; `loadConfig` either returns a complete typed config or throws one
 * `ConfigError` listing one line per bad variable.
 */
import {
  ConfigError,
  type EnvSource,
  envBoolean,
  envCustom,
  envInteger,
  envSeedList,
  envText,
  envUrl,
  IDENTITY_ENV,
  identityConfig,
  type JwtConfig,
  LOG_LEVEL_VAR,
  LOG_LEVELS,
  type LogLevel,
  readEnv,
} from '@sluice/shared';

export { ConfigError, LOG_LEVELS, type LogLevel };

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
  /** where the gateways keep their analytics (top offenders); neither set: the API cannot show them */
  redisUrl: string | undefined;
  /** `host:port` seed nodes of a Redis Cluster, instead of `redisUrl` */
  redisClusterNodes: string[] | undefined;
  /** the gateways' REDIS_KEY_PREFIX */
  redisKeyPrefix: string;
  /** gateway admin base URLs asked for top offenders when no Redis is configured (the embedded demo) */
  analyticsGateways: string[] | undefined;
  /** GATEWAY_ADMIN_TOKEN: sent to ANALYTICS_GATEWAYS as a bearer token */
  gatewayAdminToken: string | undefined;
  /** JWT_*: how explain verifies a bearer token, as a gateway would; undefined: it cannot */
  jwt: JwtConfig | undefined;
  /** CLIENT_KEY_SECRET: how explain keys a credential header, as the gateways do */
  clientKeySecret: string | undefined;
}

/** A bearer token travels in one header value: printable ASCII without spaces (RFC 6750 b64token-ish). */
const TOKEN = { pattern: /^[\x21-\x7e]+$/, mustBe: 'printable ASCII without spaces', secret: true } as const;

export const RULES_API_ENV = {
  PORT: envInteger({ description: 'listen port; 0 picks a free port', default: 8081, min: 0, max: 65535 }),
  HOST: envText({ description: 'listen address', default: '0.0.0.0', accepts: 'IP address or host name' }),
  DATABASE_URL: envUrl({
    description:
      'the Postgres database; unset: an embedded PGlite database under DATA_DIR (one process only)',
    protocols: ['postgres:', 'postgresql:'],
    example: 'postgres://user:password@host:5432/db',
    // Never echoed: it usually carries a password.
    secret: true,
    check: (url) =>
      url.hostname === '' && !url.searchParams.has('host')
        ? 'must name a host, e.g. postgres://user:password@host:5432/db'
        : undefined,
  }),
  DATA_DIR: envText({
    description:
      'where the embedded PGlite database keeps its files (DATA_DIR/rules-db); memory:// keeps them in memory',
    default: './.data',
    accepts: 'directory path',
  }),
  ADMIN_TOKEN: envText({
    description: 'bearer token with read and write access',
    defaultText: 'required unless AUTH_DISABLED=true',
    ...TOKEN,
  }),
  READ_TOKEN: envText({
    description: 'bearer token with read-only access (what gateways use); must differ from ADMIN_TOKEN',
    ...TOKEN,
  }),
  AUTH_DISABLED: envBoolean({
    description: 'true serves every request without a token (local experiments only)',
    default: false,
    accepts: 'true, false, 1 or 0',
  }),
  LOG_LEVEL: LOG_LEVEL_VAR,
  BODY_LIMIT_BYTES: envInteger({
    description: 'largest request body accepted (larger: 413)',
    default: 64 * 1024,
    min: 1024,
    max: 16 * 1024 * 1024,
  }),
  SNAPSHOT_CACHE_MS: envInteger({
    description: 'how long a replica trusts its cached rule-set version before asking the database again',
    default: 500,
    min: 0,
    max: 10_000,
  }),
  DB_TIMEOUT_MS: envInteger({
    description: 'connect timeout and per-query bound for the database; /readyz answers within it',
    default: 2_000,
    min: 100,
    max: 60_000,
  }),
  MIGRATIONS_DIR: envText({
    description: 'where the SQL migrations are read from',
    defaultText: 'migrations/ of the repository',
    accepts: 'directory path',
  }),
  REDIS_URL: envUrl({
    description:
      'the Redis the gateways share, to show their top offenders; unset (and no REDIS_CLUSTER_NODES): GET /rules/{id}/offenders answers 503',
    protocols: ['redis:', 'rediss:'],
    example: 'redis://host:6379',
    // may carry a password
    secret: true,
  }),
  REDIS_CLUSTER_NODES: envSeedList(
    'instead of REDIS_URL: seed nodes of the Redis Cluster the gateways share',
  ),
  REDIS_KEY_PREFIX: envText({
    description: "the gateways' REDIS_KEY_PREFIX, under which their analytics live",
    default: 'sluice:',
    accepts: '1–64 of A-Z a-z 0-9 : . _ - /',
  }),
  ANALYTICS_GATEWAYS: envCustom({
    description:
      "without REDIS_URL / REDIS_CLUSTER_NODES: the gateways' admin base URLs; GET /rules/{id}/offenders asks each one's GET /offenders and sums their answers",
    accepts: 'comma-separated http:// or https:// URLs',
    parse: parseGatewayUrls,
  }),
  ...IDENTITY_ENV,
  GATEWAY_ADMIN_TOKEN: envText({
    description:
      "the gateways' GATEWAY_ADMIN_TOKEN: sent as a bearer token when asking ANALYTICS_GATEWAYS for top offenders",
    secret: true,
  }),
};

/** `http://a:9090, http://b:9090/` → `['http://a:9090', 'http://b:9090']` (no trailing slash). */
function parseGatewayUrls(raw: string): { value: string[] } | { problem: string } {
  const urls: string[] = [];
  for (const item of raw.split(',').map((part) => part.trim())) {
    let url: URL | undefined;
    try {
      url = new URL(item);
    } catch {
      url = undefined;
    }
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.search !== '') {
      return {
        problem: `must be comma-separated http:// or https:// base URLs, e.g. http://gateway-a:9090,http://gateway-b:9090 (got ${JSON.stringify(item)})`,
      };
    }
    urls.push(url.href.replace(/\/+$/, ''));
  }
  return { value: urls };
}

/** Reads `env` (usually `process.env`); empty strings count as unset, as docker-compose writes them. */
export function loadConfig(env: EnvSource): Config {
  const reading = readEnv(RULES_API_ENV, env);

  const authDisabled = reading.get('AUTH_DISABLED') ?? false;
  const adminToken = reading.get('ADMIN_TOKEN');
  const readToken = reading.get('READ_TOKEN');
  if (!authDisabled && !reading.isSet('ADMIN_TOKEN')) {
    reading.report('ADMIN_TOKEN', 'is required (or set AUTH_DISABLED=true to run without authentication)');
  }
  if (readToken !== undefined && readToken === adminToken) {
    reading.report('READ_TOKEN', 'must differ from ADMIN_TOKEN');
  }
  if (reading.isSet('REDIS_URL') && reading.isSet('REDIS_CLUSTER_NODES')) {
    reading.report('REDIS_CLUSTER_NODES', 'cannot be set together with REDIS_URL: set one of them');
  }
  const keyPrefix = reading.get('REDIS_KEY_PREFIX');
  if (keyPrefix !== undefined && !/^[A-Za-z0-9:._\-/]{1,64}$/.test(keyPrefix)) {
    reading.report('REDIS_KEY_PREFIX', 'must be 1 to 64 of the characters A-Z a-z 0-9 : . _ - /');
  }

  const identity = identityConfig(reading);
  const v = reading.values();
  return {
    port: v.PORT,
    host: v.HOST,
    databaseUrl: v.DATABASE_URL,
    dataDir: v.DATA_DIR,
    adminToken: v.AUTH_DISABLED ? undefined : v.ADMIN_TOKEN,
    readToken: v.AUTH_DISABLED ? undefined : v.READ_TOKEN,
    authDisabled: v.AUTH_DISABLED,
    logLevel: v.LOG_LEVEL,
    bodyLimitBytes: v.BODY_LIMIT_BYTES,
    snapshotCacheMs: v.SNAPSHOT_CACHE_MS,
    dbTimeoutMs: v.DB_TIMEOUT_MS,
    migrationsDir: v.MIGRATIONS_DIR,
    redisUrl: v.REDIS_URL,
    redisClusterNodes: v.REDIS_CLUSTER_NODES,
    redisKeyPrefix: v.REDIS_KEY_PREFIX,
    analyticsGateways: v.ANALYTICS_GATEWAYS,
    gatewayAdminToken: v.GATEWAY_ADMIN_TOKEN,
    jwt: identity.jwt,
    clientKeySecret: identity.clientKeySecret,
  };
}
