import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkRule } from './check.js';
import { withDefaults } from './defaults.js';
import {
  compileRules,
  type MatchRequest,
  pathSpecificity,
  RuleCompileError,
  requestHostKey,
} from './match.js';
import type { Rule, RuleInput } from './schema.js';

let nextId = 0;

/** A stored rule from a partial input: `rule('r1', '/a/**', { priority: 2 })` (format 1 unless `limits`/`unlimited`). */
function rule(
  name: string,
  path: string,
  extra: Omit<Partial<RuleInput>, 'match'> & { match?: Partial<RuleInput['match']> } = {},
): Rule {
  const { match, ...rest } = extra;
  const form = rest.limits !== undefined || rest.unlimited !== undefined;
  const input: RuleInput = {
    name,
    match: { path, ...match },
    ...(form ? {} : { limit: { capacity: 10, refill: 10, period: '1s' } }),
    ...rest,
  };
  expect(checkRule(input)).toEqual([]);
  nextId++;
  return {
    ...withDefaults(input),
    id: `00000000-0000-4000-8000-${String(nextId).padStart(12, '0')}`,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
}

function req(path: string, method = 'GET', host: string | undefined = 'example.com'): MatchRequest {
  return { method, host, path };
}

/** Name of the rule that applies, or undefined. */
function winner(rules: Rule[], path: string, method = 'GET', host: string | undefined = 'example.com') {
  return compileRules(rules).match(req(path, method, host))?.name;
}

describe('compileRules: which rule applies', () => {
  it('matches nothing without rules', () => {
    const set = compileRules([]);
    expect(set.size).toBe(0);
    expect(set.match(req('/'))).toBeUndefined();
  });

  it('never matches a disabled rule, and does not count it', () => {
    const rules = [rule('off', '/a', { enabled: false, priority: 100 }), rule('on', '/**')];
    const set = compileRules(rules);
    expect(set.size).toBe(1);
    expect(set.match(req('/a'))?.name).toBe('on');
    expect(compileRules([rule('off', '/a', { enabled: false })]).match(req('/a'))).toBeUndefined();
  });

  it('prefers the highest priority over any specificity', () => {
    const rules = [rule('specific', '/a/b/c'), rule('broad', '/**', { priority: 1 })];
    expect(winner(rules, '/a/b/c')).toBe('broad');
    expect(winner([rule('neg', '/a', { priority: -1 }), rule('zero', '/**')], '/a')).toBe('zero');
  });

  it('among equal priorities prefers more literal segments', () => {
    const rules = [rule('one', '/a/*/*'), rule('two', '/a/b/*'), rule('none', '/*/*/*')];
    expect(winner(rules, '/a/b/c')).toBe('two');
    // literals count before stars: 2 literals with `**` beat 1 literal and 1 `*`
    expect(winner([rule('star', '/a/*'), rule('deep', '/a/b/**')], '/a/b')).toBe('deep');
  });

  it('among equal literals prefers fewer `*`', () => {
    expect(winner([rule('more', '/a/*/*'), rule('fewer', '/a/*/**')], '/a/b/c')).toBe('fewer');
    // `/a/**` (1 literal, 0 `*`, `**`) beats `/*/b` (1 literal, 1 `*`): fewer `*` is compared before `**`
    expect(winner([rule('star', '/*/b'), rule('glob', '/a/**')], '/a/b')).toBe('glob');
  });

  it('among equal literals and `*` puts `**` last', () => {
    expect(winner([rule('glob', '/a/**'), rule('exact', '/a')], '/a')).toBe('exact');
    expect(winner([rule('glob', '/a/*/**'), rule('exact', '/a/*')], '/a/b')).toBe('exact');
    expect(winner([rule('glob', '/**'), rule('root', '/')], '/')).toBe('root');
  });

  it('among equal priority and specificity takes the smallest name (plain string order)', () => {
    expect(winner([rule('b', '/a'), rule('a', '/a')], '/a')).toBe('a');
    expect(winner([rule('a', '/a'), rule('b', '/a')], '/a')).toBe('a');
    // same specificity, different patterns
    expect(winner([rule('zz', '/x/*'), rule('yy', '/*/y')], '/x/y')).toBe('yy');
    // plain string comparison, not numeric: '10' < '9'; '-' (0x2d) < '.' (0x2e)
    expect(winner([rule('9', '/a'), rule('10', '/a')], '/a')).toBe('10');
    expect(winner([rule('a.b', '/a'), rule('a-b', '/a')], '/a')).toBe('a-b');
  });

  it('counts a host as a condition: after priority and path, the host-specific rule comes first', () => {
    const rules = [rule('b-host', '/a', { match: { host: 'example.com' } }), rule('a-any', '/a')];
    expect(winner(rules, '/a')).toBe('b-host');
    expect(winner(rules, '/a', 'GET', 'other.com')).toBe('a-any');
    // priority and path specificity still come first
    expect(winner([...rules, rule('z-any', '/a', { priority: 1 })], '/a')).toBe('z-any');
    expect(winner([...rules, rule('z-exact', '/*')], '/a')).toBe('b-host');
    expect(
      winner([...rules, rule('c-host', '/a', { priority: 1, match: { host: 'example.com' } })], '/a'),
    ).toBe('c-host');
  });
});

describe('compileRules: methods', () => {
  it('accepts every method when methods are absent or empty', () => {
    for (const r of [rule('absent', '/a'), rule('empty', '/a', { match: { methods: [] } })]) {
      for (const method of ['GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS', 'TRACE', 'PROPFIND']) {
        expect(winner([r], '/a', method)).toBe(r.name);
      }
    }
  });

  it('otherwise accepts only the listed methods, exactly', () => {
    const rules = [rule('writes', '/a', { match: { methods: ['POST', 'PUT'] } })];
    expect(winner(rules, '/a', 'POST')).toBe('writes');
    expect(winner(rules, '/a', 'PUT')).toBe('writes');
    expect(winner(rules, '/a', 'GET')).toBeUndefined();
    expect(winner(rules, '/a', 'TRACE')).toBeUndefined();
    // request methods arrive uppercase; a lowercase one is a different method
    expect(winner(rules, '/a', 'post')).toBeUndefined();
  });

  it('lets HEAD match a rule that lists GET (servers answer HEAD with the GET handler)', () => {
    const rules = [rule('get', '/a', { match: { methods: ['GET'] } })];
    expect(winner(rules, '/a', 'HEAD')).toBe('get');
    expect(winner([rule('head', '/a', { match: { methods: ['HEAD'] } })], '/a', 'GET')).toBeUndefined();
    expect(winner([rule('post', '/a', { match: { methods: ['POST'] } })], '/a', 'HEAD')).toBeUndefined();
    expect(winner([rule('both', '/a', { match: { methods: ['GET', 'HEAD'] } })], '/a', 'HEAD')).toBe('both');
  });

  it('falls through to the next rule when the best one refuses the method', () => {
    const rules = [
      rule('post-only', '/a', { priority: 5, match: { methods: ['POST'] } }),
      rule('get-specific', '/a', { match: { methods: ['GET'] } }),
      rule('fallback', '/**', { priority: -5 }),
    ];
    expect(winner(rules, '/a', 'POST')).toBe('post-only');
    expect(winner(rules, '/a', 'GET')).toBe('get-specific');
    expect(winner(rules, '/a', 'DELETE')).toBe('fallback');
  });
});

describe('compileRules: hosts', () => {
  const rules = [rule('api', '/a', { match: { host: 'api.example.com' } })];

  it('matches the host case-insensitively and ignores the port', () => {
    for (const host of ['api.example.com', 'API.Example.COM', 'api.example.com:8080', 'Api.Example.Com:1']) {
      expect(winner(rules, '/a', 'GET', host)).toBe('api');
    }
  });

  it('refuses other hosts and requests without a host', () => {
    for (const host of ['example.com', 'api.example.com.evil', 'xapi.example.com', '', undefined]) {
      expect(winner(rules, '/a', 'GET', host)).toBeUndefined();
    }
  });

  it('handles bracketed IPv6 hosts with and without a port', () => {
    const v6 = [rule('v6', '/a', { match: { host: '[::1]' } })];
    expect(winner(v6, '/a', 'GET', '[::1]')).toBe('v6');
    expect(winner(v6, '/a', 'GET', '[::1]:8080')).toBe('v6');
    expect(winner(v6, '/a', 'GET', '[::2]:8080')).toBeUndefined();
    const v6upper = [rule('v6', '/a', { match: { host: '[FE80::1]' } })];
    expect(winner(v6upper, '/a', 'GET', '[fe80::1]:443')).toBe('v6');
  });

  it('lowercases a rule host that arrives in upper case', () => {
    const stored = { ...rule('upper', '/a'), match: { path: '/a', host: 'API.example.com' } };
    expect(winner([stored], '/a', 'GET', 'api.EXAMPLE.com')).toBe('upper');
  });

  it('lets a rule without host match any host and no host', () => {
    for (const host of ['a.com', 'b.org:81', '[::1]:80', undefined]) {
      expect(winner([rule('any', '/a')], '/a', 'GET', host)).toBe('any');
    }
  });

  it('normalises request hosts', () => {
    expect(requestHostKey('Example.COM:8080')).toBe('example.com');
    expect(requestHostKey('[::1]:8080')).toBe('[::1]');
    expect(requestHostKey('[::1]')).toBe('[::1]');
    expect(requestHostKey('::1')).toBe('::1');
    expect(requestHostKey('')).toBeUndefined();
    expect(requestHostKey(undefined)).toBeUndefined();
  });

  it('drops one trailing dot of a request host, so `api.example.com.` cannot dodge a host rule', () => {
    expect(requestHostKey('API.example.com.')).toBe('api.example.com');
    expect(requestHostKey('api.example.com.:8080')).toBe('api.example.com');
    expect(requestHostKey('api.example.com..')).toBe('api.example.com.');
    expect(requestHostKey('.')).toBe('.');
    expect(winner(rules, '/a', 'GET', 'api.example.com.')).toBe('api');
    expect(winner(rules, '/a', 'GET', 'api.example.com.:443')).toBe('api');
    expect(winner(rules, '/a', 'GET', 'api.example.com..')).toBeUndefined();
  });
});

describe('compileRules: paths', () => {
  const matches = (pattern: string, path: string) => winner([rule('r', pattern)], path) === 'r';

  it('matches zero or more segments with a final `**`', () => {
    for (const path of ['/a', '/a/', '/a/b', '/a/b/c', '/a/**', '/a/*'])
      expect(matches('/a/**', path)).toBe(true);
    for (const path of ['/', '/ab', '/b', '/b/a', '/A']) expect(matches('/a/**', path)).toBe(false);
    for (const path of ['/', '/x', '/x/y/z']) expect(matches('/**', path)).toBe(true);
  });

  it('matches exactly one segment with `*`', () => {
    expect(matches('/a/*', '/a/b')).toBe(true);
    expect(matches('/a/*', '/a/b/')).toBe(true);
    expect(matches('/a/*', '/a')).toBe(false);
    expect(matches('/a/*', '/a/')).toBe(false);
    expect(matches('/a/*', '/a/b/c')).toBe(false);
    expect(matches('/*', '/')).toBe(false);
    expect(matches('/*/c', '/b/c')).toBe(true);
    expect(matches('/*/c', '/b/d')).toBe(false);
  });

  it('matches literal segments exactly and case-sensitively', () => {
    expect(matches('/Orders', '/Orders')).toBe(true);
    expect(matches('/Orders', '/orders')).toBe(false);
    expect(matches('/a/b', '/a/b/c')).toBe(false);
    expect(matches('/a/b', '/a')).toBe(false);
    expect(matches('/', '/')).toBe(true);
    expect(matches('/', '/a')).toBe(false);
    // segments that look special to a pattern are literal in a request, and vice versa
    expect(matches('/*b', '/xb')).toBe(false);
    expect(matches('/*b', '/*b')).toBe(true);
    expect(matches('/a', '/__proto__')).toBe(false);
    expect(matches('/constructor', '/constructor')).toBe(true);
  });

  it('treats a trailing slash on the pattern or the path as absent', () => {
    expect(matches('/a/', '/a')).toBe(true);
    expect(matches('/a/', '/a/')).toBe(true);
    expect(matches('/a', '/a/')).toBe(true);
    expect(matches('/a/**/', '/a/b')).toBe(true);
    expect(winner([rule('slash', '/a/'), rule('plain', '/a/**')], '/a')).toBe('slash');
  });

  it('defines specificity as [literals, stars, globstar]', () => {
    expect(pathSpecificity('/')).toEqual([0, 0, 0]);
    expect(pathSpecificity('/**')).toEqual([0, 0, 1]);
    expect(pathSpecificity('/a/*/b/**')).toEqual([2, 1, 1]);
    expect(pathSpecificity('/a/b/')).toEqual([2, 0, 0]);
  });

  it('finds the right rule among thousands', () => {
    const rules: Rule[] = [];
    for (let i = 0; i < 3000; i++) rules.push(rule(`r${i}`, `/svc${i % 300}/v${i % 7}/*`));
    rules.push(rule('needle', '/svc42/v0/x'));
    const set = compileRules(rules);
    expect(set.size).toBe(3001);
    expect(set.match(req('/svc42/v0/x'))?.name).toBe('needle');
    // /svc42/v0/* is held by r42 and r2142 (i ≡ 42 mod 300, i ≡ 0 mod 7): 'r2142' < 'r42' as strings
    expect(set.match(req('/svc42/v0/y'))?.name).toBe('r2142');
    expect(set.match(req('/svc42/v0'))).toBeUndefined();
  });
});

describe('compileRules: what each compiled rule carries', () => {
  it('precomputes a format-1 rule: one limit named "", its client and the RateLimit-Policy header', () => {
    const set = compileRules([
      rule('orders', '/orders/**', {
        limit: { capacity: 100, refill: 100, period: '1m' },
        cost: 2,
        maxDebt: 50,
        shadow: true,
        priority: 3,
        client: { by: 'header', name: 'X-Api-Key' },
      }),
    ]);
    const c = set.match(req('/orders/1'));
    expect(c).toMatchObject({
      name: 'orders',
      priority: 3,
      shadow: true,
      format: 1,
      unlimited: false,
      policyHeader: '"orders";q=100;w=60',
      specificity: [1, 0, 1],
      conditions: 0,
    });
    expect(c?.limits).toEqual([
      {
        name: '',
        spec: { algorithm: 'token-bucket', capacity: 100, refill: 100, periodMs: 60_000, maxDebt: 50 },
        cost: 2,
        clientBy: 'header',
        clientHeader: 'x-api-key',
        clientSecret: true,
        clientClaim: undefined,
        label: 'orders',
        policyItem: '"orders";q=100;w=60',
      },
    ]);
    expect(c?.rule.match.path).toBe('/orders/**');
    expect(set.rules.map((r) => r.name)).toEqual(['orders']);
  });

  it('defaults: maxDebt = capacity, client ip without header', () => {
    const c = compileRules([rule('d', '/', { limit: { capacity: 5, refill: 1, period: 1000 } })]).match(
      req('/'),
    );
    expect(c).toMatchObject({ shadow: false, format: 1 });
    expect(c?.limits[0]).toMatchObject({ cost: 1, clientBy: 'ip', clientHeader: undefined });
    expect(c?.limits[0]?.spec).toEqual({
      algorithm: 'token-bucket',
      capacity: 5,
      refill: 1,
      periodMs: 1000,
      maxDebt: 5,
    });
    expect(c?.policyHeader).toBe('"d";q=5;w=5');
  });

  it('precomputes a format-2 rule: one limit per item, labels <rule>.<limit>, costs inherited or own', () => {
    const c = compileRules([
      rule('api', '/api/**', {
        cost: 2,
        limits: [
          {
            name: 'burst',
            client: { by: 'header', name: 'X-Api-Key' },
            capacity: 20,
            refill: 10,
            period: '1s',
          },
          { name: 'daily', algorithm: 'sliding-window', max: 10_000, window: '1d', cost: 1 },
          {
            name: 'everyone',
            client: { by: 'global' },
            capacity: 1000,
            refill: 1000,
            period: '1s',
            maxDebt: 0,
          },
          { name: 'slow', algorithm: 'sliding-window', max: 5, window: 1500 },
        ],
      }),
    ]).match(req('/api/x'))!;
    expect(c).toMatchObject({ format: 2, unlimited: false, conditions: 0 });
    expect(c.limits).toEqual([
      {
        name: 'burst',
        spec: { algorithm: 'token-bucket', capacity: 20, refill: 10, periodMs: 1000, maxDebt: 20 },
        cost: 2,
        clientBy: 'header',
        clientHeader: 'x-api-key',
        clientSecret: true,
        clientClaim: undefined,
        label: 'api.burst',
        policyItem: '"api.burst";q=20;w=2',
      },
      {
        name: 'daily',
        spec: { algorithm: 'sliding-window', max: 10_000, windowMs: 86_400_000 },
        cost: 1,
        clientBy: 'ip',
        clientHeader: undefined,
        clientSecret: false,
        clientClaim: undefined,
        label: 'api.daily',
        policyItem: '"api.daily";q=10000;w=86400',
      },
      {
        name: 'everyone',
        spec: { algorithm: 'token-bucket', capacity: 1000, refill: 1000, periodMs: 1000, maxDebt: 0 },
        cost: 2,
        clientBy: 'global',
        clientHeader: undefined,
        clientSecret: false,
        clientClaim: undefined,
        label: 'api.everyone',
        policyItem: '"api.everyone";q=1000;w=1',
      },
      {
        name: 'slow',
        spec: { algorithm: 'sliding-window', max: 5, windowMs: 1500 },
        cost: 2,
        clientBy: 'ip',
        clientHeader: undefined,
        clientSecret: false,
        clientClaim: undefined,
        label: 'api.slow',
        policyItem: '"api.slow";q=5;w=2',
      },
    ]);
    expect(c.policyHeader).toBe(
      '"api.burst";q=20;w=2, "api.daily";q=10000;w=86400, "api.everyone";q=1000;w=1, "api.slow";q=5;w=2',
    );
  });

  it('compiles an unlimited rule with no limits and an empty policy', () => {
    const c = compileRules([rule('free', '/**', { unlimited: true })]).match(req('/x'))!;
    expect(c).toMatchObject({ format: 2, unlimited: true, limits: [], policyHeader: '' });
  });

  it('counts conditions: non-empty methods, host, each header, clientIps, notClientIps', () => {
    const c = compileRules([
      rule('many', '/', {
        match: {
          methods: ['GET'],
          host: 'a.com',
          headers: { 'x-a': '1', 'X-B': '2' },
          clientIps: ['10.0.0.0/8'],
          notClientIps: ['10.0.0.1'],
          caseInsensitive: true,
        },
      }),
      rule('none', '/x', { match: { methods: [] } }),
    ]);
    expect(c.rules.map((r) => r.conditions)).toEqual([6, 0]);
  });

  it('rounds the policy window up to whole seconds, at least 1, with the header module', () => {
    const policy = (capacity: number, refill: number, period: string) =>
      compileRules([rule('p', '/p', { limit: { capacity, refill, period } })]).rules[0]!.policyHeader;
    expect(policy(5, 2, '1s')).toBe('"p";q=5;w=3');
    expect(policy(1, 1000, '1s')).toBe('"p";q=1;w=1');
    expect(policy(10, 3, '1s')).toBe('"p";q=10;w=4');
    expect(policy(1, 1, '1h')).toBe('"p";q=1;w=3600');
    const window = compileRules([
      rule('w', '/w', { limits: [{ name: 'day', algorithm: 'sliding-window', max: 7, window: '1d' }] }),
    ]).rules[0]!.policyHeader;
    expect(window).toBe('"w.day";q=7;w=86400');
  });

  it('is immutable', () => {
    const set = compileRules([rule('a', '/a')]);
    expect(Object.isFrozen(set)).toBe(true);
    expect(Object.isFrozen(set.rules)).toBe(true);
    const c = set.match(req('/a'))!;
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.limits)).toBe(true);
    expect(Object.isFrozen(c.limits[0])).toBe(true);
    expect(Object.isFrozen(c.limits[0]!.spec)).toBe(true);
  });

  it('refuses an enabled rule the rules API would have rejected, naming rule and field', () => {
    const bad = { ...rule('bad', '/a'), match: { path: '/a/**/b' } };
    expect(() => compileRules([bad])).toThrow(RuleCompileError);
    expect(() => compileRules([rule('ok', '/a'), bad])).toThrow(
      expect.objectContaining({
        code: 'RULE_INVALID',
        ruleName: 'bad',
        errors: [{ field: 'match.path', message: '`**` is only allowed as the final segment' }],
        message: 'rule "bad": match.path `**` is only allowed as the final segment',
      }),
    );
    expect(() => compileRules([{ ...bad, enabled: false }])).not.toThrow();
    const badPeriod = { ...rule('p', '/a'), limit: { capacity: 1, refill: 1, period: '0s' } };
    expect(() => compileRules([badPeriod])).toThrow(/limit\.period/);
  });
});

/** A request with headers (name → values as received) and a client IP; counts clientIp() calls. */
function fullReq(
  path: string,
  opts: { method?: string; host?: string; headers?: Record<string, string[]>; ip?: string } = {},
) {
  const calls = { ip: 0 };
  const headers = new Map(Object.entries(opts.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
  const r: MatchRequest = {
    method: opts.method ?? 'GET',
    host: opts.host ?? 'example.com',
    path,
    header: (name) => headers.get(name),
    clientIp: () => {
      calls.ip++;
      return opts.ip;
    },
  };
  return { r, calls };
}

describe('compileRules: header conditions', () => {
  const rules = [rule('free', '/a', { match: { headers: { 'X-Tier': 'free' } } }), rule('all', '/a')];
  const who = (headers: Record<string, string[]> | undefined) =>
    compileRules(rules).match(fullReq('/a', { headers }).r)?.name;

  it('holds when the header is there once with exactly that value (name case-insensitive)', () => {
    expect(who({ 'x-tier': ['free'] })).toBe('free');
  });

  it('does not hold for another value, another case of the value, or an absent header', () => {
    expect(who({ 'x-tier': ['paid'] })).toBe('all');
    expect(who({ 'x-tier': ['Free'] })).toBe('all');
    expect(who({ 'x-tier': ['free '] })).toBe('all');
    expect(who({ 'x-tier': ['free, paid'] })).toBe('all');
    expect(who({})).toBe('all');
    expect(compileRules(rules).match(req('/a'))?.name).toBe('all');
  });

  it('does not hold when the header is repeated, even with the same value each time', () => {
    expect(who({ 'x-tier': ['free', 'paid'] })).toBe('all');
    expect(who({ 'x-tier': ['paid', 'free'] })).toBe('all');
    expect(who({ 'x-tier': ['free', 'free'] })).toBe('all');
    expect(who({ 'x-tier': [] })).toBe('all');
  });

  it('needs every entry', () => {
    const two = [rule('both', '/a', { match: { headers: { 'x-a': '1', 'x-b': '2' } } })];
    const m = (headers: Record<string, string[]>) =>
      compileRules(two).match(fullReq('/a', { headers }).r)?.name;
    expect(m({ 'x-a': ['1'], 'x-b': ['2'] })).toBe('both');
    expect(m({ 'x-a': ['1'] })).toBeUndefined();
    expect(m({ 'x-b': ['2'] })).toBeUndefined();
  });

  it('puts the rule with more conditions first, and falls through when they fail', () => {
    const set = compileRules([
      rule('a-plain', '/a'),
      rule('b-one', '/a', { match: { headers: { 'x-a': '1' } } }),
      rule('c-two', '/a', { match: { headers: { 'x-a': '1' }, methods: ['POST'] } }),
    ]);
    const m = (method: string, headers: Record<string, string[]>) =>
      set.match(fullReq('/a', { method, headers }).r)?.name;
    expect(m('POST', { 'x-a': ['1'] })).toBe('c-two');
    expect(m('GET', { 'x-a': ['1'] })).toBe('b-one');
    expect(m('POST', {})).toBe('a-plain');
  });
});

describe('compileRules: client IP conditions', () => {
  const set = compileRules([
    rule('partner', '/**', { match: { clientIps: ['203.0.113.0/24', '2001:db8::/32'] } }),
    rule('not-office', '/x/**', { match: { notClientIps: ['198.51.100.7'] }, priority: -1 }),
    rule('rest', '/**', { priority: -2 }),
  ]);
  const who = (path: string, ip: string | undefined) => set.match(fullReq(path, { ip }).r)?.name;

  it('clientIps: the client IP must be in one of the nets (v4 and v6)', () => {
    expect(who('/', '203.0.113.9')).toBe('partner');
    expect(who('/', '2001:db8:1::5')).toBe('partner');
    expect(who('/', '203.0.114.9')).toBe('rest');
    expect(who('/', '2001:db9::1')).toBe('rest');
  });

  it('counts an IPv4-mapped IPv6 address as the IPv4 address, both ways', () => {
    expect(who('/', '::ffff:203.0.113.9')).toBe('partner');
    expect(who('/x', '::ffff:198.51.100.7')).toBe('rest');
    const mappedRule = compileRules([rule('m', '/', { match: { clientIps: ['::ffff:192.0.2.0/120'] } })]);
    expect(mappedRule.match(fullReq('/', { ip: '192.0.2.4' }).r)?.name).toBe('m');
    expect(mappedRule.match(fullReq('/', { ip: '192.0.3.4' }).r)).toBeUndefined();
  });

  it('notClientIps: the client IP must be in none of them', () => {
    expect(who('/x/1', '198.51.100.7')).toBe('rest');
    expect(who('/x/1', '198.51.100.8')).toBe('not-office');
  });

  it('an unknown or unreadable client IP never satisfies clientIps and always satisfies notClientIps', () => {
    for (const ip of [undefined, '', 'garbage', '203.0.113.9.1']) {
      expect(who('/', ip)).toBe('rest');
      expect(who('/x/1', ip)).toBe('not-office');
    }
    expect(set.match(req('/'))?.name).toBe('rest');
  });

  it('reads the client IP lazily: never without a candidate IP rule, at most once per lookup', () => {
    const plain = compileRules([
      rule('a', '/a'),
      rule('b', '/b/**', { match: { clientIps: ['10.0.0.0/8'] } }),
    ]);
    const one = fullReq('/a', { ip: '10.1.1.1' });
    expect(plain.match(one.r)?.name).toBe('a');
    expect(one.calls.ip).toBe(0);
    const many = compileRules([
      rule('p1', '/**', { match: { clientIps: ['10.0.0.0/8'] }, priority: 2 }),
      rule('p2', '/**', { match: { notClientIps: ['192.168.0.0/16'] }, priority: 1 }),
      rule('p3', '/**', { match: { clientIps: ['172.16.0.0/12'] } }),
    ]);
    const two = fullReq('/q', { ip: '172.16.0.1' });
    expect(many.match(two.r)?.name).toBe('p2');
    expect(two.calls.ip).toBe(1);
  });

  it('exempts a campaign region with an unlimited rule of higher priority', () => {
    const exempt = compileRules([
      rule('api', '/api/**', { client: { by: 'ip' } }),
      rule('campaign', '/api/**', {
        unlimited: true,
        priority: 10,
        match: { clientIps: ['203.0.113.0/24'] },
      }),
    ]);
    expect(exempt.match(fullReq('/api/x', { ip: '203.0.113.50' }).r)).toMatchObject({
      name: 'campaign',
      unlimited: true,
      limits: [],
    });
    expect(exempt.match(fullReq('/api/x', { ip: '192.0.2.1' }).r)?.name).toBe('api');
  });
});

describe('compileRules: canonical and case-insensitive paths', () => {
  it('matches a non-ASCII rule path against the percent-encoded request path', () => {
    const set = compileRules([rule('u', '/ü/*'), rule('cafe', '/café'), rule('sub', "/a:b@c!$&'()+,=")]);
    expect(set.match(req('/%C3%BC/x'))?.name).toBe('u');
    expect(set.match(req('/caf%C3%A9'))?.name).toBe('cafe');
    expect(set.match(req("/a:b@c!$&'()+,="))?.name).toBe('sub');
    // the request normaliser hands over canonical paths: lower-case hex is not the same spelling
    expect(set.match(req('/%c3%bc/x'))).toBeUndefined();
    expect(set.match(req('/ü/x'))).toBeUndefined();
  });

  it('matches escaped sub-delims, `:` and `@` like the raw characters (upstreams decode them)', () => {
    const set = compileRules([rule('batch', '/v1/items:batch'), rule('sub', "/a:b@c!$&'()+,=")]);
    expect(set.match(req('/v1/items%3Abatch'))?.name).toBe('batch');
    expect(set.match(req('/v1/items%3abatch'))).toBeUndefined(); // not canonical: never handed over
    expect(set.match(req('/a%3Ab%40c%21%24%26%27%28%29%2B%2C%3D'))?.name).toBe('sub');
    // other escapes keep their meaning: `%2F` is never a separator, `%25` never a second escape
    expect(set.match(req('/v1%2Fitems:batch'))).toBeUndefined();
    expect(set.match(req('/v1/items%253Abatch'))).toBeUndefined();
  });

  it('compares literal segments case-insensitively (ASCII) for a caseInsensitive rule only', () => {
    const set = compileRules([
      rule('admin', '/Admin/**', { match: { caseInsensitive: true } }),
      rule('exact', '/Exact'),
      rule('u', '/ÄB', { match: { caseInsensitive: true } }),
    ]);
    for (const path of ['/admin', '/ADMIN/x', '/aDmIn/Y/z']) expect(set.match(req(path))?.name).toBe('admin');
    expect(set.match(req('/Exact'))?.name).toBe('exact');
    expect(set.match(req('/exact'))).toBeUndefined();
    expect(set.match(req('/adminx'))).toBeUndefined();
    // ASCII only: the percent-encoded Ä is not folded into ä, but its hex digits may be spelled either way
    expect(set.match(req('/%C3%84b'))?.name).toBe('u');
    expect(set.match(req('/%C3%A4B'))).toBeUndefined();
  });

  it('keeps precedence across case-sensitive and case-insensitive rules', () => {
    const set = compileRules([
      rule('ci-specific', '/a/b', { match: { caseInsensitive: true } }),
      rule('cs-broad', '/a/**'),
      rule('cs-high', '/**', { priority: 1, match: { methods: ['POST'] } }),
    ]);
    expect(set.match(req('/A/B'))?.name).toBe('ci-specific');
    expect(set.match(req('/a/b'))?.name).toBe('ci-specific');
    expect(set.match(req('/a/c'))?.name).toBe('cs-broad');
    expect(set.match(req('/A/B', 'POST'))?.name).toBe('cs-high');
  });
});

// ---------------------------------------------------------------------------------------------
// Property: the trie matcher agrees with a plain reference over random rule sets and requests.

/** Which of the generated IPs lie in which generated net, written out by hand (independent of BlockList). */
const NETS = ['10.0.0.0/8', '10.1.0.0/16', '2001:db8::/32', '192.0.2.1'] as const;
const IN_NETS: Record<string, readonly string[]> = {
  '10.1.2.3': ['10.0.0.0/8', '10.1.0.0/16'],
  '::ffff:10.1.2.3': ['10.0.0.0/8', '10.1.0.0/16'],
  '10.2.0.1': ['10.0.0.0/8'],
  '2001:db8::1': ['2001:db8::/32'],
  '192.0.2.1': ['192.0.2.1'],
  '8.8.8.8': [],
  garbage: [],
};

interface RefRequest {
  method: string;
  host: string | undefined;
  path: string;
  headers: Record<string, readonly string[]>;
  ip: string | undefined;
}

/** Reference: docs/rules.md "Which rule applies", written as plainly as possible. */
function referenceMatch(rules: readonly Rule[], r: RefRequest) {
  const segmentsOf = (p: string) => {
    const parts = p.split('/').slice(1);
    if (parts.length > 0 && parts[parts.length - 1] === '') parts.pop();
    return parts;
  };
  // canonical form of the generated rule segments: ASCII letters and `*` stay, the rest is UTF-8 %XX
  const canonical = (segment: string) =>
    [...segment].map((c) => (/[A-Za-z0-9*]/.test(c) ? c : encodeURIComponent(c))).join('');
  const fold = (s: string) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());
  const pathMatches = (pattern: string[], path: string[], ci: boolean): boolean => {
    if (pattern.length === 0) return path.length === 0;
    const [head, ...rest] = pattern;
    if (head === '**') return true;
    if (path.length === 0) return false;
    const same = ci ? fold(canonical(head!)) === fold(path[0]!) : canonical(head!) === path[0];
    return (head === '*' || same) && pathMatches(rest, path.slice(1), ci);
  };
  const requestHost = r.host?.toLowerCase().replace(/:\d*$/, '').replace(/\.$/, '');
  const specificity = (rule: Rule) => {
    const segs = segmentsOf(rule.match.path);
    return {
      literals: segs.filter((s) => s !== '*' && s !== '**').length,
      stars: segs.filter((s) => s === '*').length,
      globstar: segs.includes('**') ? 1 : 0,
    };
  };
  const conditions = (rule: Rule) =>
    (rule.match.methods?.length ? 1 : 0) +
    (rule.match.host ? 1 : 0) +
    Object.keys(rule.match.headers ?? {}).length +
    (rule.match.clientIps ? 1 : 0) +
    (rule.match.notClientIps ? 1 : 0);
  const methodOk = (rule: Rule) => {
    const methods = (rule.match.methods ?? []) as string[];
    return (
      methods.length === 0 || methods.includes(r.method) || (r.method === 'HEAD' && methods.includes('GET'))
    );
  };
  const headersOk = (rule: Rule) =>
    Object.entries(rule.match.headers ?? {}).every(([name, value]) => {
      const got = Object.entries(r.headers).find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1];
      return got !== undefined && got.length === 1 && got[0] === value;
    });
  const inAny = (nets: readonly string[]) =>
    r.ip !== undefined && nets.some((n) => (IN_NETS[r.ip!] ?? []).includes(n));
  const candidates = rules.filter(
    (rule) =>
      rule.enabled &&
      methodOk(rule) &&
      (rule.match.host === undefined || rule.match.host.toLowerCase() === requestHost) &&
      headersOk(rule) &&
      (rule.match.clientIps === undefined || inAny(rule.match.clientIps)) &&
      (rule.match.notClientIps === undefined || !inAny(rule.match.notClientIps)) &&
      pathMatches(segmentsOf(rule.match.path), segmentsOf(r.path), rule.match.caseInsensitive === true),
  );
  candidates.sort((a, b) => {
    const sa = specificity(a);
    const sb = specificity(b);
    return (
      b.priority - a.priority ||
      sb.literals - sa.literals ||
      sa.stars - sb.stars ||
      sa.globstar - sb.globstar ||
      conditions(b) - conditions(a) ||
      (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
    );
  });
  return candidates[0];
}

/** undefined three times out of four */
const rarely = <T>(arb: fc.Arbitrary<T>) =>
  fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, { arbitrary: arb, weight: 1 });

const ruleSpecArb = fc.record({
  name: fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,2}$/),
  segments: fc.array(fc.constantFrom('a', 'b', 'B', 'c', 'ü', '*'), { maxLength: 4 }),
  globstar: fc.boolean(),
  trailingSlash: fc.boolean(),
  methods: fc.option(fc.subarray(['GET', 'HEAD', 'POST', 'DELETE'] as const), { nil: undefined }),
  host: fc.option(fc.constantFrom('a.com', 'B.com', '[::1]'), { nil: undefined, freq: 2 }),
  headers: rarely(
    fc.dictionary(fc.constantFrom('x-a', 'X-B'), fc.constantFrom('1', '2'), { minKeys: 1, maxKeys: 2 }),
  ),
  clientIps: rarely(fc.subarray([...NETS], { minLength: 1 })),
  notClientIps: rarely(fc.subarray([...NETS], { minLength: 1 })),
  caseInsensitive: fc.option(fc.boolean(), { nil: undefined }),
  unlimited: fc.boolean(),
  priority: fc.integer({ min: -1, max: 1 }),
  enabled: fc.constantFrom(true, true, true, false),
});

const rulesArb = fc
  .uniqueArray(ruleSpecArb, { minLength: 1, maxLength: 30, size: 'max', selector: (s) => s.name })
  .map((specs) =>
    specs.map((s, i) => {
      const segments = s.globstar ? [...s.segments, '**'] : s.segments;
      const path = `/${segments.join('/')}${s.trailingSlash && segments.length > 0 ? '/' : ''}`;
      const base = rule(s.name, path, {
        priority: s.priority,
        enabled: s.enabled,
        ...(s.unlimited ? { unlimited: true } : {}),
      });
      const match: Rule['match'] = { path };
      if (s.methods !== undefined) match.methods = [...s.methods];
      if (s.host !== undefined) match.host = s.host; // kept as generated, upper case included
      if (s.headers !== undefined) match.headers = s.headers; // names as generated, upper case included
      if (s.clientIps !== undefined) match.clientIps = s.clientIps;
      if (s.notClientIps !== undefined) match.notClientIps = s.notClientIps;
      if (s.caseInsensitive !== undefined) match.caseInsensitive = s.caseInsensitive;
      return { ...base, id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, match };
    }),
  );

const requestArb = fc.record({
  method: fc.constantFrom('GET', 'HEAD', 'POST', 'DELETE', 'PUT', 'TRACE'),
  host: fc.constantFrom(
    undefined,
    'a.com',
    'A.COM:8080',
    'a.com.',
    'b.com',
    'B.com.:1',
    '[::1]:8080',
    '[::1]',
    'c.com:1',
  ),
  path: fc
    .tuple(
      fc.array(fc.constantFrom('a', 'a', 'b', 'b', 'B', 'c', 'd', 'A', '*', '%C3%BC', '%c3%bc', '%C3%9C'), {
        maxLength: 4,
      }),
      fc.boolean(),
    )
    .map(([segs, slash]) => `/${segs.join('/')}${slash && segs.length > 0 ? '/' : ''}`),
  headers: fc.dictionary(
    fc.constantFrom('x-a', 'x-b', 'x-c'),
    fc.oneof(
      { arbitrary: fc.constantFrom(['1'], ['2']), weight: 4 },
      { arbitrary: fc.array(fc.constantFrom('1', '2', '3'), { maxLength: 2 }), weight: 1 },
    ),
    { maxKeys: 3 },
  ),
  ip: fc.constantFrom(undefined, ...Object.keys(IN_NETS)),
});

describe('compileRules: property against the reference', () => {
  it('picks the same rule as the plain reference (3,000 rule sets × up to 25 requests)', () => {
    let lookups = 0;
    let matched = 0;
    let conditional = 0;
    fc.assert(
      fc.property(
        rulesArb,
        fc.array(requestArb, { minLength: 5, maxLength: 25, size: 'max' }),
        (rules, requests) => {
          const set = compileRules(rules);
          for (const r of requests) {
            const expected = referenceMatch(rules, r);
            const actual = set.match({
              method: r.method,
              host: r.host,
              path: r.path,
              header: (name) => r.headers[name],
              clientIp: () => r.ip,
            });
            lookups++;
            if (expected) matched++;
            if (actual !== undefined && actual.conditions > 0) conditional++;
            expect(actual?.name).toBe(expected?.name);
            expect(actual?.rule).toBe(expected);
          }
        },
      ),
      { numRuns: 3000 },
    );
    // the generators must make matches (and matches decided by conditions) common, or the property says little
    console.log(
      `match property: ${lookups} lookups, ${((100 * matched) / lookups).toFixed(1)}% matched, ${((100 * conditional) / lookups).toFixed(1)}% by a rule with conditions`,
    );
    expect(matched / lookups).toBeGreaterThan(0.25);
    expect(conditional / lookups).toBeGreaterThan(0.05);
  });
});
