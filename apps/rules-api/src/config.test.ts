import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, RULES_API_ENV } from './config.js';

/** The problems `loadConfig` reports for `env`, one line per bad variable. */
function problems(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('loadConfig', () => {
  it('fills the documented defaults', () => {
    expect(loadConfig({ ADMIN_TOKEN: 'a' })).toEqual({
      port: 8081,
      host: '0.0.0.0',
      databaseUrl: undefined,
      dataDir: './.data',
      adminToken: 'a',
      readToken: undefined,
      authDisabled: false,
      logLevel: 'info',
      bodyLimitBytes: 65_536,
      snapshotCacheMs: 500,
      dbTimeoutMs: 2_000,
      migrationsDir: undefined,
      redisUrl: undefined,
      redisClusterNodes: undefined,
      redisKeyPrefix: 'sluice:',
      analyticsGateways: undefined,
    });
  });

  it('reads the analytics Redis: a URL or cluster nodes, never both', () => {
    expect(loadConfig({ ADMIN_TOKEN: 'a', REDIS_URL: 'redis://r:6379' }).redisUrl).toBe('redis://r:6379');
    expect(
      loadConfig({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: 'r1:7000, r2:7001' }).redisClusterNodes,
    ).toEqual(['r1:7000', 'r2:7001']);
    expect(() =>
      loadConfig({ ADMIN_TOKEN: 'a', REDIS_URL: 'redis://r:6379', REDIS_CLUSTER_NODES: 'r1:7000' }),
    ).toThrow(/REDIS_CLUSTER_NODES: cannot be set together with REDIS_URL/);
    expect(() => loadConfig({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: 'r1' })).toThrow(/host:port/);
    expect(() => loadConfig({ ADMIN_TOKEN: 'a', REDIS_KEY_PREFIX: 'a{b}' })).toThrow(/REDIS_KEY_PREFIX/);
  });

  it('takes IPv6 cluster seeds in brackets, as the gateway does, and refuses a bad seed in one line', () => {
    expect(loadConfig({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: '[::1]:7000' }).redisClusterNodes).toEqual([
      '[::1]:7000',
    ]);
    const shape =
      'REDIS_CLUSTER_NODES: must be comma-separated host:port (IPv6 in brackets), e.g. redis-1:6379,[::1]:7000';
    expect(problems({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: '::1:7000' })).toEqual([
      `${shape}; "::1:7000" needs brackets around its IPv6 address, e.g. [::1]:7000 (got "::1:7000")`,
    ]);
    expect(problems({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: 'host' })).toEqual([
      `${shape}; "host" has no port (got "host")`,
    ]);
    expect(problems({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: 'host:0' })).toEqual([
      `${shape}; "host:0" has port 0, outside 1–65535 (got "host:0")`,
    ]);
    expect(problems({ ADMIN_TOKEN: 'a', REDIS_CLUSTER_NODES: 'host:70000' })).toEqual([
      `${shape}; "host:70000" has port 70000, outside 1–65535 (got "host:70000")`,
    ]);
  });

  it('reads ANALYTICS_GATEWAYS as gateway admin base URLs, without trailing slashes', () => {
    expect(
      loadConfig({ ADMIN_TOKEN: 'a', ANALYTICS_GATEWAYS: 'http://gw-a:9090/, https://gw-b:9443/admin' })
        .analyticsGateways,
    ).toEqual(['http://gw-a:9090', 'https://gw-b:9443/admin']);
    expect(problems({ ADMIN_TOKEN: 'a', ANALYTICS_GATEWAYS: 'http://gw-a:9090,gw-b:9090' })).toEqual([
      expect.stringMatching(/^ANALYTICS_GATEWAYS: .*http:\/\/ or https:\/\/.*"gw-b:9090"/),
    ]);
    expect(problems({ ADMIN_TOKEN: 'a', ANALYTICS_GATEWAYS: 'redis://r:6379' })).toHaveLength(1);
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '9000',
      HOST: '127.0.0.1',
      DATABASE_URL: 'postgresql://u:p@db:5432/rules',
      DATA_DIR: '/var/lib/sluice',
      ADMIN_TOKEN: 'admin-token',
      READ_TOKEN: 'read-token',
      LOG_LEVEL: 'debug',
      BODY_LIMIT_BYTES: '2048',
      SNAPSHOT_CACHE_MS: '0',
      DB_TIMEOUT_MS: '1500',
      MIGRATIONS_DIR: '/migrations',
    });
    expect(config).toMatchObject({
      port: 9000,
      host: '127.0.0.1',
      databaseUrl: 'postgresql://u:p@db:5432/rules',
      dataDir: '/var/lib/sluice',
      adminToken: 'admin-token',
      readToken: 'read-token',
      logLevel: 'debug',
      bodyLimitBytes: 2048,
      snapshotCacheMs: 0,
      dbTimeoutMs: 1500,
      migrationsDir: '/migrations',
    });
  });

  it('treats empty values as unset', () => {
    expect(loadConfig({ ADMIN_TOKEN: 'a', PORT: '', DATABASE_URL: ' ' })).toMatchObject({
      port: 8081,
      databaseUrl: undefined,
    });
  });

  it.each([
    [{}, 'ADMIN_TOKEN: is required (or set AUTH_DISABLED=true to run without authentication)'],
    [
      { ADMIN_TOKEN: '' },
      'ADMIN_TOKEN: is required (or set AUTH_DISABLED=true to run without authentication)',
    ],
    [{ ADMIN_TOKEN: 'a', PORT: 'http' }, 'PORT: must be an integer from 0 to 65535 (got "http")'],
    [{ ADMIN_TOKEN: 'a', PORT: '65536' }, 'PORT: must be an integer from 0 to 65535 (got "65536")'],
    [{ ADMIN_TOKEN: 'a', PORT: '-1' }, 'PORT: must be an integer from 0 to 65535 (got "-1")'],
    [{ ADMIN_TOKEN: 'a', PORT: '80.5' }, 'PORT: must be an integer from 0 to 65535 (got "80.5")'],
    [
      { ADMIN_TOKEN: 'a', DATABASE_URL: 'mysql://u:p@db/x' },
      'DATABASE_URL: must start with postgres:// or postgresql:// (got scheme "mysql:")',
    ],
    [
      { ADMIN_TOKEN: 'a', DATABASE_URL: 'not a url' },
      'DATABASE_URL: must be a URL like postgres://user:password@host:5432/db',
    ],
    [
      { ADMIN_TOKEN: 'a', DATABASE_URL: 'postgres://' },
      'DATABASE_URL: must name a host, e.g. postgres://user:password@host:5432/db',
    ],
    [{ ADMIN_TOKEN: 'a', AUTH_DISABLED: 'yes' }, 'AUTH_DISABLED: must be true or false (got "yes")'],
    [{ ADMIN_TOKEN: 'a', READ_TOKEN: 'a' }, 'READ_TOKEN: must differ from ADMIN_TOKEN'],
    [{ ADMIN_TOKEN: 'a b' }, 'ADMIN_TOKEN: must be printable ASCII without spaces'],
    [{ ADMIN_TOKEN: 'a', READ_TOKEN: 'tök' }, 'READ_TOKEN: must be printable ASCII without spaces'],
    [
      { ADMIN_TOKEN: 'a', LOG_LEVEL: 'verbose' },
      'LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent (got "verbose")',
    ],
    [
      { ADMIN_TOKEN: 'a', BODY_LIMIT_BYTES: '10' },
      'BODY_LIMIT_BYTES: must be an integer from 1024 to 16777216 (got "10")',
    ],
    [
      { ADMIN_TOKEN: 'a', SNAPSHOT_CACHE_MS: '1s' },
      'SNAPSHOT_CACHE_MS: must be an integer from 0 to 10000 (got "1s")',
    ],
    [
      { ADMIN_TOKEN: 'a', DB_TIMEOUT_MS: '0' },
      'DB_TIMEOUT_MS: must be an integer from 100 to 60000 (got "0")',
    ],
  ])('%j → %s', (env, message) => {
    expect(problems(env)).toEqual([message]);
  });

  it('reports every bad variable at once, one line each, and never echoes a database password', () => {
    const lines = problems({ PORT: 'x', DATABASE_URL: 'redis://user:hunter2@cache', LOG_LEVEL: 'x' });
    expect(lines).toHaveLength(4);
    expect(lines.join('\n')).not.toContain('hunter2');
    expect(new ConfigError(lines).message.split('\n').slice(1)).toEqual(lines);
  });

  it('AUTH_DISABLED=true needs no ADMIN_TOKEN and drops any token given', () => {
    expect(loadConfig({ AUTH_DISABLED: 'true' })).toMatchObject({
      authDisabled: true,
      adminToken: undefined,
    });
    expect(loadConfig({ AUTH_DISABLED: 'true', ADMIN_TOKEN: 'a', READ_TOKEN: 'b' })).toMatchObject({
      adminToken: undefined,
      readToken: undefined,
    });
    expect(loadConfig({ AUTH_DISABLED: 'false', ADMIN_TOKEN: 'a' }).authDisabled).toBe(false);
  });
});

describe('the variable table', () => {
  const docs = readFileSync(new URL('../../../docs/configuration.md', import.meta.url), 'utf8');
  const start = docs.indexOf('\n## Rules API');
  const section = docs.slice(start, docs.indexOf('\n## ', start + 1));

  it.each(Object.entries(RULES_API_ENV))('%s has a one-line description', (_name, variable) => {
    expect(variable.description.length).toBeGreaterThan(10);
    expect(variable.description).not.toMatch(/\n/);
  });

  it.each(Object.entries(RULES_API_ENV))(
    '%s is in docs/configuration.md with its default',
    (name, variable) => {
      const row = section.split('\n').find((line) => line.startsWith(`| \`${name}\``));
      expect(row, `no row for ${name} in the rules API section of docs/configuration.md`).toBeDefined();
      const defaultColumn = row
        ?.split('|')[2]
        ?.trim()
        .replace(/^`(.*)`$/, '$1');
      expect(defaultColumn).toBe(variable.defaultText);
    },
  );
});
