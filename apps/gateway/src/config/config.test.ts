import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, fastifyTrustProxy, GATEWAY_ENV, loadConfig, parseUpstreams } from './config.js';

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
  it('fills every documented default (docs/configuration.md)', () => {
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
      forwardedHeaders: 'x-forwarded',
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
      'UPSTREAMS: is required (e.g. /orders=http://orders:3000,/=http://web:3000)',
      'RULES_API_URL: is required (e.g. http://rules-api:8081)',
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
      'PORT: must be an integer from 0 to 65535 (got "70000")',
      'ADMIN_PORT: must be an integer from 0 to 65535 (got "x")',
      'UPSTREAM_TIMEOUT_MS: must be an integer from 1 to 3600000 (got "0")',
      'RULES_REFRESH: must be a node-cron expression with seconds (six fields, e.g. */5 * * * * *) (got "every 5 seconds")',
      'REDIS_URL: must start with redis:// or rediss:// (got scheme "http:")',
      'STORE_FAILURE: must be one of local, open, closed (got "fail-open")',
      'STORE_TIMEOUT_MS: must be an integer from 1 to 60000 (got "-5")',
      'LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent (got "loud")',
    ]);
  });

  it('MAX_HEADER_COUNT: default 200, an integer from 1 to 10000', () => {
    expect(loadConfig(REQUIRED).maxHeaderCount).toBe(200);
    expect(loadConfig({ ...REQUIRED, MAX_HEADER_COUNT: '50' }).maxHeaderCount).toBe(50);
    expect(problemsOf({ ...REQUIRED, MAX_HEADER_COUNT: '0' })).toEqual([
      'MAX_HEADER_COUNT: must be an integer from 1 to 10000 (got "0")',
    ]);
  });

  it('never echoes a REDIS_URL (it may carry a password)', () => {
    const problems = problemsOf({ ...REQUIRED, REDIS_URL: 'not a url with secret' });
    expect(problems).toEqual(['REDIS_URL: must be a URL like redis://host:6379']);
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
      'RULES_API_URL: must start with http:// or https:// (got "ftp://x")',
    ]);
    expect(problemsOf({ ...REQUIRED, RULES_API_URL: 'http://x/?a=1' })).toEqual([
      'RULES_API_URL: must not carry a query or a fragment (got "http://x/?a=1")',
    ]);
    expect(problemsOf({ ...REQUIRED, RULES_API_URL: 'http://user:hunter2@x/' })).toEqual([
      'RULES_API_URL: must not carry credentials (set RULES_API_TOKEN instead)',
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
    ['orders=http://a:1', 'entry "orders=http://a:1": must start with a path prefix like /orders, or a host'],
    ['/orders/=http://a:1', 'prefix "/orders/" must be a normalised path'],
    ['/a/../b=http://a:1', 'prefix "/a/../b" must be a normalised path'],
    ['/a//b=http://a:1', 'prefix "/a//b" must be a normalised path'],
    ['/:id=http://a:1', 'prefix "/:id" must be a normalised path'],
    ['/a*=http://a:1', 'prefix "/a*" must be a normalised path'],
    ['/a%20b=http://a:1', 'prefix "/a%20b" must be a normalised path'],
    ['/a', 'entry "/a": must be prefix=url or host/prefix=url'],
    [
      '/a=http://a:1/base',
      'entry "/a=http://a:1/base": upstream must be an origin like http://orders:3000 (no path, query or credentials: the request path is forwarded as is) (got "http://a:1/base")',
    ],
    ['/a=ftp://a', 'entry "/a=ftp://a": upstream must start with http:// or https:// (got "ftp://a")'],
    ['/a=http://a:1,/a=http://b:1', 'entry "/a=http://b:1": prefix "/a" appears twice'],
    [' , ', 'must hold at least one prefix=url entry'],
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
    const list = fastifyTrustProxy(['10.0.0.0/8', 'loopback']) as (address: string, hop: number) => boolean;
    expect(['10.1.2.3', '127.0.0.1', '::1', '8.8.8.8', 'junk'].map((a) => list(a, 0))).toEqual([
      true,
      true,
      true,
      false,
      false,
    ]);
    expect(fastifyTrustProxy(false)).toBe(false);
    expect((fastifyTrustProxy(true) as (address: string, hop: number) => boolean)('8.8.8.8', 7)).toBe(true);
  });
});

describe('empty values', () => {
  it('count as unset, as docker-compose writes them', () => {
    const config = loadConfig({
      ...REQUIRED,
      PORT: '',
      REDIS_URL: '',
      REDIS_KEY_PREFIX: '',
      TRUST_PROXY: ' ',
      HEADERS_TIMEOUT_MS: '',
    });
    expect(config).toMatchObject({
      port: 8080,
      redisUrl: undefined,
      redisKeyPrefix: 'sluice:',
      trustProxy: false,
      headersTimeoutMs: 10_000,
    });
  });
});

describe('REDIS_KEY_PREFIX', () => {
  it('takes letters, digits and : . _ - /', () => {
    expect(loadConfig({ ...REQUIRED, REDIS_KEY_PREFIX: 'acme/prod:sluice-1.2_x:' }).redisKeyPrefix).toBe(
      'acme/prod:sluice-1.2_x:',
    );
  });

  it.each(['a{b}:', '{tenant}:', 'x}'])(
    'refuses %s: a brace would move the Redis Cluster hash tag',
    (prefix) => {
      expect(problemsOf({ ...REQUIRED, REDIS_KEY_PREFIX: prefix })).toEqual([
        `REDIS_KEY_PREFIX: must not contain { or }: bucket keys keep a Redis Cluster hash tag {…} after the prefix, which a brace in the prefix would move (got ${JSON.stringify(prefix)})`,
      ]);
    },
  );

  it.each(['sluice prod:', 'tenant*:', 'ключ:', 'a\nb', 'x'.repeat(65)])('refuses %j', (prefix) => {
    const problems = problemsOf({ ...REQUIRED, REDIS_KEY_PREFIX: prefix });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(
      /^REDIS_KEY_PREFIX: must be 1 to 64 of the characters A-Z a-z 0-9 : \. _ - \/ \(got /,
    );
  });
});

describe('listener timeouts', () => {
  it('default to 10 s for the head, 120 s for the whole request and 72 s idle keep-alive', () => {
    expect(loadConfig(REQUIRED)).toMatchObject({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 120_000,
      keepAliveTimeoutMs: 72_000,
    });
  });

  it('reads HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS and KEEP_ALIVE_TIMEOUT_MS', () => {
    expect(
      loadConfig({
        ...REQUIRED,
        HEADERS_TIMEOUT_MS: '2000',
        REQUEST_TIMEOUT_MS: '2000',
        KEEP_ALIVE_TIMEOUT_MS: '750',
      }),
    ).toMatchObject({ headersTimeoutMs: 2_000, requestTimeoutMs: 2_000, keepAliveTimeoutMs: 750 });
  });

  it('refuses a head timeout longer than the request timeout, blaming the variable that was set', () => {
    expect(problemsOf({ ...REQUIRED, HEADERS_TIMEOUT_MS: '150000' })).toEqual([
      'HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS (120000): the head is part of the request (got "150000")',
    ]);
    expect(problemsOf({ ...REQUIRED, HEADERS_TIMEOUT_MS: '5000', REQUEST_TIMEOUT_MS: '4000' })).toEqual([
      'HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS (4000): the head is part of the request (got "5000")',
    ]);
    expect(problemsOf({ ...REQUIRED, REQUEST_TIMEOUT_MS: '3000' })).toEqual([
      'REQUEST_TIMEOUT_MS: must be at least HEADERS_TIMEOUT_MS (10000, its default): the head is part of the request (got "3000")',
    ]);
  });

  it.each([
    ['HEADERS_TIMEOUT_MS', '0', 'must be an integer from 1 to 3600000 (got "0")'],
    ['KEEP_ALIVE_TIMEOUT_MS', '0', 'must be an integer from 1 to 600000 (got "0")'],
    ['KEEP_ALIVE_TIMEOUT_MS', '5s', 'must be an integer from 1 to 600000 (got "5s")'],
  ])('%s=%s: %s', (name, value, problem) => {
    expect(problemsOf({ ...REQUIRED, [name]: value })).toEqual([`${name}: ${problem}`]);
  });
});

describe('UPSTREAMS entries naming a host', () => {
  it('take the host before the first slash, normalised as request hosts are', () => {
    expect(
      parseUpstreams(
        'API.Example.COM./orders=http://orders:3000,api.example.com:8443/=http://api:3000,[::1]:8080/x=http://v6:1',
      ),
    ).toEqual([
      { host: '[::1]', prefix: '/x', origin: 'http://v6:1' },
      { host: 'api.example.com', prefix: '/orders', origin: 'http://orders:3000' },
      { host: 'api.example.com', prefix: '/', origin: 'http://api:3000' },
    ]);
  });

  it('order entries naming a host first, longest prefix first within each host, then the others', () => {
    const upstreams = parseUpstreams(
      '/=http://web:1,b.example/=http://b:1,/api/v2=http://v2:1,a.example/api=http://a:1,b.example/api/v2=http://b2:1,/api=http://api:1',
    );
    expect(upstreams).toEqual([
      { host: 'a.example', prefix: '/api', origin: 'http://a:1' },
      { host: 'b.example', prefix: '/api/v2', origin: 'http://b2:1' },
      { host: 'b.example', prefix: '/', origin: 'http://b:1' },
      { prefix: '/api/v2', origin: 'http://v2:1' },
      { prefix: '/api', origin: 'http://api:1' },
      { prefix: '/', origin: 'http://web:1' },
    ]);
    expect(upstreams[5]).not.toHaveProperty('host');
  });

  it('let the same prefix appear once per host and once without a host', () => {
    expect(parseUpstreams('a.example/x=http://a:1,b.example/x=http://b:1,/x=http://c:1')).toHaveLength(3);
  });

  it('reach the config through loadConfig', () => {
    expect(
      loadConfig({ ...REQUIRED, UPSTREAMS: 'api.example.com/orders=http://orders:3000' }).upstreams,
    ).toEqual([{ host: 'api.example.com', prefix: '/orders', origin: 'http://orders:3000' }]);
  });

  it.each([
    [
      'a.example/x=http://a:1,A.EXAMPLE./x=http://b:1',
      'entry "A.EXAMPLE./x=http://b:1": host "a.example" with prefix "/x" appears twice',
    ],
    [
      'api.example.com=http://a:1',
      'entry "api.example.com=http://a:1": must start with a path prefix like /orders, or a host',
    ],
    [
      'a..b/x=http://a:1',
      'entry "a..b/x=http://a:1": host must be a host name like api.example.com, a dotted-quad IPv4 address or a bracketed IPv6 address like [::1], optionally with a port (got "a..b")',
    ],
    ['a.b c/x=http://a:1', '(got "a.b c")'],
    ['010.0.0.1/x=http://a:1', '(got "010.0.0.1")'],
    ['u@api.example.com/x=http://a:1', '(got "u@api.example.com")'],
    ['api.example.com:99999/x=http://a:1', '(got "api.example.com:99999")'],
    ['[zz::1]/x=http://a:1', '(got "[zz::1]")'],
    ['[::1/x=http://a:1', '(got "[::1")'],
    ['::1/x=http://a:1', '(got "::1")'],
    ['a.example..//x=http://a:1', '(got "a.example..")'],
    ['a.example/x/=http://a:1', 'prefix "/x/" must be a normalised path'],
  ])('%s is refused', (raw, problem) => {
    const result = parseUpstreams(raw);
    expect(typeof result).toBe('string');
    expect(result).toContain(problem);
  });

  it('UPSTREAMS problems name the variable and the entry', () => {
    expect(problemsOf({ ...REQUIRED, UPSTREAMS: '/=http://web:1,x%y/=http://a:1' })).toEqual([
      'UPSTREAMS: entry "x%y/=http://a:1": host must be a host name like api.example.com, a dotted-quad IPv4 address or a bracketed IPv6 address like [::1], optionally with a port (got "x%y")',
    ]);
  });

  it('take host names exactly as requests spell them, so an entry can always be reached', () => {
    // the same normaliser reads the Host header: Docker service names with `_` are valid both ways
    expect(parseUpstreams('orders_v2/x=http://a:1')).toEqual([
      { host: 'orders_v2', prefix: '/x', origin: 'http://a:1' },
    ]);
  });
});

describe('FORWARDED_HEADERS', () => {
  it.each(['x-forwarded', 'forwarded', 'both', 'none'])('takes %s', (mode) => {
    expect(loadConfig({ ...REQUIRED, FORWARDED_HEADERS: mode }).forwardedHeaders).toBe(mode);
  });

  it.each(['X-Forwarded', 'rfc7239', 'x-forwarded,forwarded'])('refuses %j in one line', (mode) => {
    expect(problemsOf({ ...REQUIRED, FORWARDED_HEADERS: mode })).toEqual([
      `FORWARDED_HEADERS: must be one of x-forwarded, forwarded, both, none (got ${JSON.stringify(mode)})`,
    ]);
  });
});

describe('UPSTREAMS entries with ;preserveHost', () => {
  it('keep the client Host for that entry only', () => {
    expect(
      parseUpstreams(
        'api.example.com/=http://api:3000;preserveHost, /=http://web:3000 ; preserveHost ,/x=http://x:1',
      ),
    ).toEqual([
      { host: 'api.example.com', prefix: '/', origin: 'http://api:3000', preserveHost: true },
      { prefix: '/x', origin: 'http://x:1' },
      { prefix: '/', origin: 'http://web:3000', preserveHost: true },
    ]);
  });

  it.each([
    [
      '/=http://web:3000;preservehost',
      'unknown option "preservehost" after the origin (an option is one of ;preserveHost)',
    ],
    ['/=http://web:3000;', 'unknown option "" after the origin'],
    ['/=http://web:3000/base;preserveHost', 'upstream must be an origin like http://orders:3000'],
  ])('%s is refused in one line naming the entry', (raw, problem) => {
    const problems = problemsOf({ ...REQUIRED, UPSTREAMS: raw });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain(`UPSTREAMS: entry ${JSON.stringify(raw)}: ${problem}`);
  });
});

describe('the variable table', () => {
  const docs = readFileSync(new URL('../../../../docs/configuration.md', import.meta.url), 'utf8');
  const section = docs.slice(
    docs.indexOf('\n## Gateway'),
    docs.indexOf('\n## ', docs.indexOf('\n## Gateway') + 1),
  );

  it.each(Object.entries(GATEWAY_ENV))('%s has a one-line description', (_name, variable) => {
    expect(variable.description.length).toBeGreaterThan(10);
    expect(variable.description).not.toMatch(/\n/);
  });

  it.each(Object.entries(GATEWAY_ENV))(
    '%s is in docs/configuration.md with its default',
    (name, variable) => {
      const row = section.split('\n').find((line) => line.startsWith(`| \`${name}\``));
      expect(row, `no row for ${name} in the gateway section of docs/configuration.md`).toBeDefined();
      const defaultColumn = row
        ?.split('|')[2]
        ?.trim()
        .replace(/^`(.*)`$/, '$1');
      expect(defaultColumn).toBe(variable.defaultText);
    },
  );
});

describe('REDIS_CLUSTER_NODES', () => {
  const base = { UPSTREAMS: '/=http://web:3000', RULES_API_URL: 'http://rules-api:8081' };

  it('takes comma-separated host:port seeds', () => {
    const config = loadConfig({ ...base, REDIS_CLUSTER_NODES: 'redis-1:6379, 10.0.0.2:7000,[::1]:7001' });
    expect(config.redisClusterNodes).toEqual(['redis-1:6379', '10.0.0.2:7000', '[::1]:7001']);
    expect(config.redisUrl).toBeUndefined();
    expect(loadConfig(base).redisClusterNodes).toBeUndefined();
  });

  it('refuses an entry without a port', () => {
    expect(() => loadConfig({ ...base, REDIS_CLUSTER_NODES: 'redis-1:6379,redis-2' })).toThrow(
      /^REDIS_CLUSTER_NODES: must be comma-separated host:port.*"redis-2"/m,
    );
  });

  it('takes an IPv6 seed in brackets, and refuses a bare IPv6 address, no port or a port outside 1–65535, each in one line', () => {
    expect(loadConfig({ ...base, REDIS_CLUSTER_NODES: '[::1]:7000' }).redisClusterNodes).toEqual([
      '[::1]:7000',
    ]);
    const shape =
      'REDIS_CLUSTER_NODES: must be comma-separated host:port (IPv6 in brackets), e.g. redis-1:6379,[::1]:7000';
    expect(problemsOf({ ...base, REDIS_CLUSTER_NODES: '::1:7000' })).toEqual([
      `${shape}; "::1:7000" needs brackets around its IPv6 address, e.g. [::1]:7000 (got "::1:7000")`,
    ]);
    expect(problemsOf({ ...base, REDIS_CLUSTER_NODES: 'host' })).toEqual([
      `${shape}; "host" has no port (got "host")`,
    ]);
    expect(problemsOf({ ...base, REDIS_CLUSTER_NODES: 'host:0' })).toEqual([
      `${shape}; "host:0" has port 0, outside 1–65535 (got "host:0")`,
    ]);
    expect(problemsOf({ ...base, REDIS_CLUSTER_NODES: 'host:70000' })).toEqual([
      `${shape}; "host:70000" has port 70000, outside 1–65535 (got "host:70000")`,
    ]);
  });

  it('is a startup error together with REDIS_URL, naming both', () => {
    expect(() =>
      loadConfig({ ...base, REDIS_URL: 'redis://redis:6379', REDIS_CLUSTER_NODES: 'redis-1:6379' }),
    ).toThrow(/^REDIS_CLUSTER_NODES: must not be set together with REDIS_URL/m);
  });
});
