import { describe, expect, it } from 'vitest';
import { ConfigError, fastifyTrustProxy, loadConfig, parseUpstreams } from './config.js';

const REQUIRED = { UPSTREAMS: '/=http://web:3000', RULES_API_URL: 'http://rules-api:8081' };

function problemsOf(env: Record<string, string>): readonly string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe('loadConfig', () => {
  it('fills every default of SPEC §1', () => {
    const config = loadConfig(REQUIRED);
    expect(config).toMatchObject({
      port: 8080,
      host: '0.0.0.0',
      adminPort: 9090,
      upstreams: [{ prefix: '/', origin: 'http://web:3000' }],
      upstreamTimeoutMs: 30_000,
      rulesApiUrl: 'http://rules-api:8081',
      rulesApiToken: undefined,
      rulesRefresh: '*/5 * * * * *',
      redisUrl: undefined,
      trustProxy: false,
      storeFailure: 'local',
      storeTimeoutMs: 50,
    });
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '80',
      HOST: '127.0.0.1',
      ADMIN_PORT: '9100',
      UPSTREAMS: '/=http://web:3000, /orders=http://orders:3000/',
      UPSTREAM_TIMEOUT_MS: '1500',
      RULES_API_URL: 'https://rules.internal/',
      RULES_API_TOKEN: 'tok',
      RULES_REFRESH: '*/2 * * * * *',
      REDIS_URL: 'redis://:secret@redis:6379/0',
      TRUST_PROXY: '2',
      STORE_FAILURE: 'closed',
      STORE_TIMEOUT_MS: '25',
    });
    expect(config).toMatchObject({
      port: 80,
      host: '127.0.0.1',
      adminPort: 9100,
      upstreams: [
        { prefix: '/orders', origin: 'http://orders:3000' },
        { prefix: '/', origin: 'http://web:3000' },
      ],
      upstreamTimeoutMs: 1500,
      rulesApiUrl: 'https://rules.internal',
      rulesApiToken: 'tok',
      rulesRefresh: '*/2 * * * * *',
      redisUrl: 'redis://:secret@redis:6379/0',
      trustProxy: 2,
      storeFailure: 'closed',
      storeTimeoutMs: 25,
    });
  });

  it('names each bad variable on a line of its own', () => {
    expect(problemsOf({})).toEqual([
      'UPSTREAMS: required: comma-separated prefix=url pairs, e.g. /orders=http://orders:3000,/=http://web:3000',
      'RULES_API_URL: required, e.g. http://rules-api:8081',
    ]);
    expect(
      problemsOf({
        ...REQUIRED,
        PORT: '70000',
        ADMIN_PORT: 'x',
        UPSTREAM_TIMEOUT_MS: '0',
        RULES_REFRESH: 'every 5 seconds',
        REDIS_URL: 'http://:secret@redis',
        STORE_FAILURE: 'fail-open',
        STORE_TIMEOUT_MS: '-5',
        LOG_LEVEL: 'loud',
      }),
    ).toEqual([
      'PORT: 70000 is not between 0 and 65535',
      'ADMIN_PORT: "x" is not a whole number',
      'UPSTREAM_TIMEOUT_MS: 0 is not between 1 and 3600000',
      'RULES_REFRESH: "every 5 seconds" is not a node-cron expression (six fields with seconds, e.g. */5 * * * * *)',
      'REDIS_URL: must start with redis:// or rediss://',
      'STORE_FAILURE: "fail-open" is not one of local, open, closed',
      'STORE_TIMEOUT_MS: "-5" is not a whole number',
      'LOG_LEVEL: "loud" is not one of fatal, error, warn, info, debug, trace, silent',
    ]);
  });

  it('never echoes a REDIS_URL (it may carry a password)', () => {
    const problems = problemsOf({ ...REQUIRED, REDIS_URL: 'not a url with secret' });
    expect(problems).toEqual(['REDIS_URL: is not a URL like redis://host:6379']);
  });

  it('keeps the admin listener off the proxy port', () => {
    expect(problemsOf({ ...REQUIRED, PORT: '9090' })).toEqual([
      'PORT: must differ from ADMIN_PORT (9090); the admin listener is never on the proxy port',
    ]);
    expect(problemsOf({ ...REQUIRED, ADMIN_PORT: '8080' })).toEqual([
      'ADMIN_PORT: must differ from PORT (8080); the admin listener is never on the proxy port',
    ]);
    expect(loadConfig({ ...REQUIRED, PORT: '0', ADMIN_PORT: '0' }).port).toBe(0);
  });

  it('rejects a RULES_API_URL that is not plain http(s)', () => {
    expect(problemsOf({ ...REQUIRED, RULES_API_URL: 'ftp://x' })).toEqual([
      'RULES_API_URL: "ftp://x" must start with http:// or https://',
    ]);
    expect(problemsOf({ ...REQUIRED, RULES_API_URL: 'http://x/?a=1' })).toEqual([
      'RULES_API_URL: "http://x/?a=1" must not carry a query, a fragment or credentials',
    ]);
  });
});

describe('UPSTREAMS', () => {
  it('sorts longest prefix first', () => {
    expect(parseUpstreams('/=http://a:1,/api/v2=http://c:3,/api=http://b:2')).toEqual([
      { prefix: '/api/v2', origin: 'http://c:3' },
      { prefix: '/api', origin: 'http://b:2' },
      { prefix: '/', origin: 'http://a:1' },
    ]);
  });

  it.each([
    ['orders=http://a:1', 'prefix "orders" must be a normalised path'],
    ['/orders/=http://a:1', 'prefix "/orders/" must be a normalised path'],
    ['/a/../b=http://a:1', 'prefix "/a/../b" must be a normalised path'],
    ['/a//b=http://a:1', 'prefix "/a//b" must be a normalised path'],
    ['/:id=http://a:1', 'prefix "/:id" must be a normalised path'],
    ['/a*=http://a:1', 'prefix "/a*" must be a normalised path'],
    ['/a%20b=http://a:1', 'prefix "/a%20b" must be a normalised path'],
    ['/a', '"/a" is not a prefix=url pair'],
    ['/a=http://a:1/base', 'upstream of /a: "http://a:1/base" must be an origin like http://host:3000'],
    ['/a=ftp://a', 'upstream of /a: "ftp://a" must start with http:// or https://'],
    ['/a=http://a:1,/a=http://b:1', 'prefix "/a" appears twice'],
    [' , ', 'no prefix=url pair'],
  ])('%s is refused', (raw, problem) => {
    const result = parseUpstreams(raw);
    expect(typeof result).toBe('string');
    expect(result).toContain(problem);
  });
});

describe('TRUST_PROXY', () => {
  const trust = (value: string) => loadConfig({ ...REQUIRED, TRUST_PROXY: value }).trustProxy;

  it('reads false, true, a hop count and address lists', () => {
    expect(trust('false')).toBe(false);
    expect(trust('TRUE')).toBe(true);
    expect(trust('0')).toBe(false);
    expect(trust('3')).toBe(3);
    expect(trust('10.0.0.0/8, 192.168.1.7,loopback, fd00::/8')).toEqual([
      '10.0.0.0/8',
      '192.168.1.7',
      'loopback',
      'fd00::/8',
    ]);
  });

  it.each(['10.0.0.0/33', 'fd00::/129', 'proxy.internal', '10.0.0.0/x', '1.2.3', '101'])(
    'refuses %s',
    (value) => {
      expect(problemsOf({ ...REQUIRED, TRUST_PROXY: value })).toHaveLength(1);
    },
  );

  it('a hop count trusts exactly that many proxies (Fastify alone would trust none)', () => {
    const fn = fastifyTrustProxy(2) as (address: string, hop: number) => boolean;
    expect([0, 1, 2, 3].map((hop) => fn('10.0.0.1', hop))).toEqual([true, true, false, false]);
    expect(fastifyTrustProxy(['10.0.0.0/8', 'loopback'])).toBe('10.0.0.0/8,loopback');
    expect(fastifyTrustProxy(false)).toBe(false);
  });
});
