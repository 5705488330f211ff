import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileRules, pathSpecificity, RuleCompileError, refillWindowSec, requestHostKey } from './match.js';
import { type Rule, type RuleInput, withDefaults } from './schema.js';

let nextId = 0;

/** A stored rule from a partial input: `rule('r1', '/a/**', { priority: 2 })`. */
function rule(
  name: string,
  path: string,
  extra: Omit<Partial<RuleInput>, 'match'> & { match?: Partial<RuleInput['match']> } = {},
): Rule {
  const { match, ...rest } = extra;
  const input: RuleInput = {
    name,
    match: { path, ...match },
    limit: { capacity: 10, refill: 10, period: '1s' },
    ...rest,
  };
  nextId++;
  return {
    ...withDefaults(input),
    id: `00000000-0000-4000-8000-${String(nextId).padStart(12, '0')}`,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
}

function req(path: string, method = 'GET', host: string | undefined = 'example.com') {
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

  it('keeps precedence when a host-specific rule and a generic rule compete (host is not specificity)', () => {
    const rules = [rule('b-host', '/a', { match: { host: 'example.com' } }), rule('a-any', '/a')];
    expect(winner(rules, '/a')).toBe('a-any');
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

  it('does not let HEAD match a GET-only rule', () => {
    const rules = [rule('get', '/a', { match: { methods: ['GET'] } })];
    expect(winner(rules, '/a', 'HEAD')).toBeUndefined();
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
  it('precomputes limits, cost, client and the RateLimit-Policy header', () => {
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
      cost: 2,
      limits: { capacity: 100, refill: 100, periodMs: 60_000, maxDebt: 50 },
      clientBy: 'header',
      clientHeader: 'x-api-key',
      windowSec: 60,
      policyHeader: '"orders";q=100;w=60',
      specificity: [1, 0, 1],
    });
    expect(c?.rule.match.path).toBe('/orders/**');
    expect(set.rules.map((r) => r.name)).toEqual(['orders']);
  });

  it('defaults: maxDebt = capacity, client ip without header', () => {
    const c = compileRules([rule('d', '/', { limit: { capacity: 5, refill: 1, period: 1000 } })]).match(
      req('/'),
    );
    expect(c).toMatchObject({ cost: 1, clientBy: 'ip', clientHeader: undefined, shadow: false });
    expect(c?.limits).toEqual({ capacity: 5, refill: 1, periodMs: 1000, maxDebt: 5 });
    expect(c?.policyHeader).toBe('"d";q=5;w=5');
  });

  it('rounds the policy window up to whole seconds, at least 1', () => {
    expect(refillWindowSec({ capacity: 5, refill: 2, periodMs: 1000 })).toBe(3);
    expect(refillWindowSec({ capacity: 1, refill: 1000, periodMs: 1000 })).toBe(1);
    expect(refillWindowSec({ capacity: 10, refill: 1, periodMs: 1000 })).toBe(10);
    expect(refillWindowSec({ capacity: 3, refill: 0.1, periodMs: 1000 })).toBe(30);
    expect(refillWindowSec({ capacity: 10, refill: 3, periodMs: 1000 })).toBe(4);
    expect(refillWindowSec({ capacity: 1e12, refill: 1e-300, periodMs: 31_536_000_000 })).toBe(
      999_999_999_999_999,
    );
  });

  it('is immutable', () => {
    const set = compileRules([rule('a', '/a')]);
    expect(Object.isFrozen(set)).toBe(true);
    expect(Object.isFrozen(set.rules)).toBe(true);
    const c = set.match(req('/a'))!;
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.limits)).toBe(true);
  });

  it('refuses an enabled rule the rules API would have rejected, naming rule and field', () => {
    const bad = { ...rule('bad', '/a'), match: { path: '/a/**/b' } };
    expect(() => compileRules([bad])).toThrow(RuleCompileError);
    try {
      compileRules([rule('ok', '/a'), bad]);
    } catch (err) {
      expect(err).toMatchObject({ code: 'RULE_INVALID', ruleName: 'bad', errors: [{ field: 'match.path' }] });
    }
    expect(() => compileRules([{ ...bad, enabled: false }])).not.toThrow();
    const badPeriod = { ...rule('p', '/a'), limit: { capacity: 1, refill: 1, period: '0s' } };
    expect(() => compileRules([badPeriod])).toThrow(/limit\.period/);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: the trie matcher agrees with a plain reference over random rule sets and requests.

/** Reference: SPEC §2 "Which rule applies", written as plainly as possible. */
function referenceMatch(
  rules: readonly Rule[],
  r: { method: string; host: string | undefined; path: string },
) {
  const segmentsOf = (p: string) => {
    const parts = p.split('/').slice(1);
    if (parts.length > 0 && parts[parts.length - 1] === '') parts.pop();
    return parts;
  };
  const pathMatches = (pattern: string[], path: string[]): boolean => {
    if (pattern.length === 0) return path.length === 0;
    const [head, ...rest] = pattern;
    if (head === '**') return true;
    if (path.length === 0) return false;
    return (head === '*' || head === path[0]) && pathMatches(rest, path.slice(1));
  };
  const requestHost = r.host?.toLowerCase().replace(/:\d*$/, '');
  const specificity = (rule: Rule) => {
    const segs = segmentsOf(rule.match.path);
    return {
      literals: segs.filter((s) => s !== '*' && s !== '**').length,
      stars: segs.filter((s) => s === '*').length,
      globstar: segs.includes('**') ? 1 : 0,
    };
  };
  const candidates = rules.filter(
    (rule) =>
      rule.enabled &&
      (!rule.match.methods ||
        rule.match.methods.length === 0 ||
        (rule.match.methods as string[]).includes(r.method)) &&
      (rule.match.host === undefined || rule.match.host.toLowerCase() === requestHost) &&
      pathMatches(segmentsOf(rule.match.path), segmentsOf(r.path)),
  );
  candidates.sort((a, b) => {
    const sa = specificity(a);
    const sb = specificity(b);
    return (
      b.priority - a.priority ||
      sb.literals - sa.literals ||
      sa.stars - sb.stars ||
      sa.globstar - sb.globstar ||
      (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
    );
  });
  return candidates[0];
}

const ruleSpecArb = fc.record({
  name: fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,2}$/),
  segments: fc.array(fc.constantFrom('a', 'b', 'c', '*'), { maxLength: 4 }),
  globstar: fc.boolean(),
  trailingSlash: fc.boolean(),
  methods: fc.option(fc.subarray(['GET', 'HEAD', 'POST', 'DELETE'] as const), { nil: undefined }),
  host: fc.option(fc.constantFrom('a.com', 'B.com', '[::1]'), { nil: undefined, freq: 2 }),
  priority: fc.integer({ min: -1, max: 1 }),
  enabled: fc.constantFrom(true, true, true, false),
});

const rulesArb = fc
  .uniqueArray(ruleSpecArb, { minLength: 1, maxLength: 30, size: 'max', selector: (s) => s.name })
  .map((specs) =>
    specs.map((s, i) => {
      const segments = s.globstar ? [...s.segments, '**'] : s.segments;
      const path = `/${segments.join('/')}${s.trailingSlash && segments.length > 0 ? '/' : ''}`;
      const base = rule(s.name, path, { priority: s.priority, enabled: s.enabled });
      const match: Rule['match'] = { path };
      if (s.methods !== undefined) match.methods = [...s.methods];
      if (s.host !== undefined) match.host = s.host; // kept as generated, upper case included
      return { ...base, id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, match };
    }),
  );

const requestArb = fc.record({
  method: fc.constantFrom('GET', 'HEAD', 'POST', 'DELETE', 'PUT', 'TRACE'),
  host: fc.constantFrom(undefined, 'a.com', 'A.COM:8080', 'b.com', '[::1]:8080', '[::1]', 'c.com:1'),
  path: fc
    .tuple(fc.array(fc.constantFrom('a', 'a', 'b', 'b', 'c', 'd', 'A', '*'), { maxLength: 4 }), fc.boolean())
    .map(([segs, slash]) => `/${segs.join('/')}${slash && segs.length > 0 ? '/' : ''}`),
});

describe('compileRules: property against the reference', () => {
  it('picks the same rule as the plain reference (3,000 rule sets × up to 25 requests)', () => {
    let lookups = 0;
    let matched = 0;
    fc.assert(
      fc.property(
        rulesArb,
        fc.array(requestArb, { minLength: 5, maxLength: 25, size: 'max' }),
        (rules, requests) => {
          const set = compileRules(rules);
          for (const r of requests) {
            const expected = referenceMatch(rules, r);
            const actual = set.match(r);
            lookups++;
            if (expected) matched++;
            expect(actual?.name).toBe(expected?.name);
            expect(actual?.rule).toBe(expected);
          }
        },
      ),
      { numRuns: 3000 },
    );
    // the generators must make matches common, or the property says little
    console.log(`match property: ${lookups} lookups, ${((100 * matched) / lookups).toFixed(1)}% matched`);
    expect(matched / lookups).toBeGreaterThan(0.25);
  });
});
