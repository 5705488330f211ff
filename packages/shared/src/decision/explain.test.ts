import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normalizePath } from '../http/normalize-path.js';
import { SecretClientKeys } from '../identity/secret-keys.js';
import { compileRules } from '../rules/match.js';
import type { RuleInput } from '../rules/schema.js';
import { storedRule } from '../rules/stored-rule.js';
import { clientKeyOf, compileExplainer, ipClientKeyOf, MAX_CONSIDERED } from './explain.js';

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;
const bucket = { capacity: 10, refill: 10, period: '1s' };

describe('client keys', () => {
  it('writes IPv4 as is, IPv4-mapped IPv6 as IPv4, other IPv6 by its /64', () => {
    expect(ipClientKeyOf('203.0.113.7')).toBe('ip:203.0.113.7');
    expect(ipClientKeyOf('::ffff:203.0.113.7')).toBe('ip:203.0.113.7');
    expect(ipClientKeyOf('2001:db8:1:2:3:4:5:6')).toBe('ip:2001:db8:1:2::/64');
    expect(ipClientKeyOf('2001:0DB8:0001:0002::9')).toBe('ip:2001:db8:1:2::/64');
    expect(ipClientKeyOf('2001:db8::1')).toBe('ip:2001:db8:0:0::/64');
    expect(ipClientKeyOf('::1')).toBe('ip:0:0:0:0::/64');
    expect(ipClientKeyOf(undefined)).toBe('ip:unknown');
  });

  it('keys a header client by its value, hashed over 256 bytes, and by IP without the header', () => {
    const limit = { clientBy: 'header' as const, clientHeader: 'x-api-key' };
    expect(clientKeyOf(limit, ['k1'], '203.0.113.7')).toBe('header:k1');
    expect(clientKeyOf(limit, ['a', 'b'], '203.0.113.7')).toBe('header:a, b');
    const long = 'x'.repeat(257);
    expect(clientKeyOf(limit, [long], undefined)).toMatch(/^header:[0-9a-f]{64}$/);
    expect(clientKeyOf(limit, ['x'.repeat(256)], undefined)).toBe(`header:${'x'.repeat(256)}`);
    expect(clientKeyOf(limit, undefined, '203.0.113.7')).toBe('ip:203.0.113.7');
    expect(clientKeyOf(limit, [''], '2001:db8:1:2::1')).toBe('ip:2001:db8:1:2::/64');
    expect(clientKeyOf({ clientBy: 'global', clientHeader: undefined }, undefined, '1.2.3.4')).toBe('global');
  });
});

describe('compileExplainer', () => {
  const search = rule({
    name: 'search',
    match: { path: '/search/**' },
    limits: [
      { name: 'burst', client: { by: 'header', name: 'x-api-key' }, ...bucket },
      { name: 'daily', algorithm: 'sliding-window', max: 100, window: '1d' },
      { name: 'everyone', client: { by: 'global' }, ...bucket },
    ],
  });
  const free = rule({
    name: 'search-free',
    match: { path: '/search/**', headers: { 'x-tier': 'free' } },
    limit: bucket,
    priority: 5,
  });
  const partner = rule({
    name: 'search-partner',
    match: { path: '/search/**', clientIps: ['198.51.100.0/24'] },
    unlimited: true,
    priority: 10,
  });
  const wide = rule({ name: 'all', match: { path: '/**' }, limit: bucket });
  const posts = rule({ name: 'posts-only', match: { path: '/search/**', methods: ['POST'] }, limit: bucket });
  const off = rule({ name: 'old', match: { path: '/search/x' }, limit: bucket, enabled: false });
  const explainer = compileExplainer([search, free, partner, wide, posts, off]);

  it('names the chosen rule, its limits with client keys, and why the others lost', () => {
    const result = explainer.explain({
      method: 'GET',
      host: 'API.example.com:8443',
      path: '/search/./x?q=1',
      headers: { 'X-Api-Key': 'k-1', 'x-tier': 'pro' },
      clientIp: '203.0.113.7',
    });
    expect(result).toMatchObject({
      path: '/search/x',
      error: null,
      host: 'api.example.com',
      rule: { id: search.id, name: 'search' },
      unlimited: false,
      limits: [
        // x-api-key is a credential: explain shows its digest, as the gateway keys it
        {
          name: 'burst',
          algorithm: 'token-bucket',
          clientKey: new SecretClientKeys(undefined).clientKey('k-1'),
        },
        { name: 'daily', algorithm: 'sliding-window', clientKey: 'ip:203.0.113.7' },
        { name: 'everyone', algorithm: 'token-bucket', clientKey: 'global' },
      ],
    });
    expect(result.considered).toEqual([
      { name: 'search', matched: true, reason: 'chosen (enforced)' },
      { name: 'all', matched: true, reason: 'less specific path than "search" (/** vs /search/**)' },
      { name: 'search-free', matched: false, reason: 'header x-tier is not "free"' },
      { name: 'search-partner', matched: false, reason: 'client IP not in clientIps' },
      { name: 'posts-only', matched: false, reason: 'method GET is not one of POST' },
      { name: 'old', matched: false, reason: 'rule is disabled' },
    ]);
  });

  it('explains priority, exemptions and a v1 rule', () => {
    const partnerResult = explainer.explain({ method: 'GET', path: '/search/a', clientIp: '198.51.100.9' });
    expect(partnerResult.rule?.name).toBe('search-partner');
    expect(partnerResult.unlimited).toBe(true);
    expect(partnerResult.limits).toEqual([]);
    expect(partnerResult.considered).toContainEqual({
      name: 'search',
      matched: true,
      reason: 'lower priority than "search-partner" (0 < 10)',
    });
    expect(partnerResult.considered[0]).toEqual({
      name: 'search-partner',
      matched: true,
      reason: 'chosen (no limit)',
    });

    const freeResult = explainer.explain({ method: 'GET', path: '/search/a', headers: { 'x-tier': 'free' } });
    expect(freeResult.rule?.name).toBe('search-free');
    expect(freeResult.limits).toEqual([{ name: '', algorithm: 'token-bucket', clientKey: 'ip:unknown' }]);
    expect(freeResult.considered).toContainEqual({
      name: 'search-partner',
      matched: false,
      reason: 'client IP unknown, so not in clientIps',
    });

    const repeated = explainer.explain({
      method: 'GET',
      path: '/search/a',
      headers: { 'x-tier': ['free', 'free'] },
    });
    expect(repeated.considered).toContainEqual({
      name: 'search-free',
      matched: false,
      reason: 'header x-tier is sent 2 times (a repeated header never matches)',
    });
    // a rule whose path fits but not its method is considered, with its method list as the reason
    expect(repeated.considered).toContainEqual({
      name: 'posts-only',
      matched: false,
      reason: 'method GET is not one of POST',
    });
  });

  it("answers an unsafe path with the normaliser's 400 code and no rule", () => {
    const result = explainer.explain({ method: 'GET', path: '/search/../../etc' });
    expect(result).toEqual({
      path: null,
      error: { statusCode: 400, code: 'PATH_ESCAPES_ROOT', message: expect.any(String) },
      host: null,
      rule: null,
      unlimited: false,
      limits: [],
      considered: [],
      identity: { authenticated: false, reason: 'no bearer token' },
    });
  });

  it("refuses what the gateway's HTTP parser refuses, and reads Host and header values as the gateway does", () => {
    const code = (request: Parameters<typeof explainer.explain>[0]) => explainer.explain(request).error?.code;
    // methods are case-sensitive on the wire: Node answers `get /search/x` with 400
    expect(code({ method: 'get', path: '/search/x' })).toBe('METHOD_INVALID');
    expect(code({ method: 'FOO', path: '/search/x' })).toBe('METHOD_INVALID');
    // a request line carries ASCII only: raw UTF-8 is refused, its percent-encoded spelling is not
    const raw = explainer.explain({ method: 'GET', path: '/café/a' });
    expect(raw.error).toEqual({
      statusCode: 400,
      code: 'TARGET_INVALID',
      message: expect.stringContaining('%C3%A9'),
    });
    expect(code({ method: 'GET', path: '/caf%C3%A9/a' })).toBeUndefined();
    expect(code({ method: 'GET', path: '/a b' })).toBe('TARGET_INVALID');
    // spaces and tabs around the Host are dropped; a second Host line (among the headers) is refused
    expect(explainer.explain({ method: 'GET', host: ' \tAPI.example.com.\t', path: '/' }).host).toBe(
      'api.example.com',
    );
    expect(code({ method: 'GET', host: 'a.example', headers: { Host: 'a.example' }, path: '/' })).toBe(
      'HOST_DUPLICATE',
    );
    expect(code({ method: 'GET', host: 'api.example.com..', path: '/' })).toBe('HOST_INVALID');
    expect(code({ method: 'GET', host: 'a\x01b', path: '/' })).toBe('HEADER_INVALID');
    // a header value is read byte by byte off the wire, as the gateway keys it
    const keyed = explainer.explain({
      method: 'GET',
      path: '/search/x',
      headers: { 'x-api-key': ' ключ\t' },
    });
    // x-api-key is a credential: the key is the hash of those bytes, trimmed
    expect(keyed.limits[0]?.clientKey).toBe(
      new SecretClientKeys(undefined).clientKey(Buffer.from('ключ').toString('latin1')),
    );
    const cookies = explainer.explain({
      method: 'GET',
      path: '/search/x',
      headers: { 'x-tier': ' \tfree ', 'x-api-key': ['a=1', 'b=2'] },
    });
    expect(cookies.rule?.name).toBe('search-free');
  });

  it(`bounds considered to ${MAX_CONSIDERED} entries, the chosen rule first`, () => {
    const many = Array.from({ length: 60 }, (_, i) =>
      rule({
        name: `r${String(i).padStart(2, '0')}`,
        match: { path: '/x/**' },
        limit: bucket,
        priority: i % 7,
      }),
    );
    const result = compileExplainer(many).explain({ method: 'GET', path: '/x/y' });
    expect(result.considered).toHaveLength(MAX_CONSIDERED);
    expect(result.considered[0]).toMatchObject({ name: 'r06', reason: 'chosen (enforced)' });
  });
});

// ---------------------------------------------------------------- property

const NETS = ['10.0.0.0/8', '10.1.0.0/16', '2001:db8::/32', '192.0.2.1'];
const rarely = <T>(arb: fc.Arbitrary<T>) =>
  fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, { arbitrary: arb, weight: 1 });

const ruleInputArb: fc.Arbitrary<RuleInput> = fc
  .record({
    name: fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,2}$/),
    segments: fc.array(fc.constantFrom('a', 'b', 'B', 'ü', '*'), { maxLength: 3 }),
    globstar: fc.boolean(),
    methods: rarely(fc.subarray(['GET', 'POST', 'DELETE'] as const)),
    host: rarely(fc.constantFrom('a.com', 'B.com')),
    headers: rarely(
      fc.dictionary(fc.constantFrom('x-a', 'X-B'), fc.constantFrom('1', '2'), { minKeys: 1, maxKeys: 2 }),
    ),
    clientIps: rarely(fc.subarray(NETS, { minLength: 1 })),
    notClientIps: rarely(fc.subarray(NETS, { minLength: 1 })),
    caseInsensitive: rarely(fc.boolean()),
    shape: fc.constantFrom('v1', 'v2', 'unlimited'),
    priority: fc.integer({ min: -1, max: 1 }),
    enabled: fc.constantFrom(true, true, true, false),
  })
  .map((s) => {
    const segments = s.globstar ? [...s.segments, '**'] : s.segments;
    const match: RuleInput['match'] = { path: `/${segments.join('/')}` };
    if (s.methods !== undefined) match.methods = [...s.methods];
    if (s.host !== undefined) match.host = s.host;
    if (s.headers !== undefined) match.headers = s.headers;
    if (s.clientIps !== undefined) match.clientIps = s.clientIps;
    if (s.notClientIps !== undefined) match.notClientIps = s.notClientIps;
    if (s.caseInsensitive !== undefined) match.caseInsensitive = s.caseInsensitive;
    const common = { name: s.name, match, priority: s.priority, enabled: s.enabled };
    if (s.shape === 'unlimited') return { ...common, unlimited: true as const };
    if (s.shape === 'v1') return { ...common, limit: bucket };
    return {
      ...common,
      limits: [
        { name: 'a', client: { by: 'header' as const, name: 'x-a' }, ...bucket },
        { name: 'b', algorithm: 'sliding-window' as const, max: 5, window: '1m' },
      ],
    };
  });

const requestArb = fc.record({
  method: fc.constantFrom('GET', 'HEAD', 'POST', 'DELETE', 'PUT'),
  host: fc.constantFrom(undefined, 'a.com', 'A.COM:8080', 'b.com.', 'c.com'),
  path: fc
    .array(fc.constantFrom('a', 'a', 'b', 'B', 'A', '.', '..', '%C3%BC', '%c3%bc', '%2F', 'x\\y', ''), {
      maxLength: 4,
    })
    .map((segs) => `/${segs.join('/')}`),
  headers: fc.dictionary(
    fc.constantFrom('x-a', 'X-B', 'x-c'),
    fc.oneof(fc.constantFrom('1', '2'), fc.array(fc.constantFrom('1', '2'), { maxLength: 2 })),
    { maxKeys: 3 },
  ),
  clientIp: fc.constantFrom(
    undefined,
    '10.1.2.3',
    '::ffff:10.1.2.3',
    '10.2.0.1',
    '2001:db8::1',
    '192.0.2.1',
    '8.8.8.8',
  ),
});

describe('compileExplainer: property against the gateway matcher', () => {
  it('chooses the rule compileRules(rules).match chooses on the normalised request, or refuses like the normaliser', () => {
    let chosen = 0;
    let refused = 0;
    let total = 0;
    fc.assert(
      fc.property(
        fc.uniqueArray(ruleInputArb, { minLength: 1, maxLength: 20, selector: (r) => r.name }),
        fc.array(requestArb, { minLength: 1, maxLength: 10 }),
        (inputs, requests) => {
          const rules = inputs.map(rule);
          const explainer = compileExplainer(rules);
          const gateway = compileRules(rules);
          for (const r of requests) {
            total++;
            const result = explainer.explain(r);
            const target = normalizePath(r.path);
            if (!target.ok) {
              refused++;
              expect(result.error).toEqual({ statusCode: 400, code: target.code, message: target.message });
              expect(result.rule).toBeNull();
              continue;
            }
            const distinct = new Map<string, string[]>();
            for (const [name, value] of Object.entries(r.headers)) {
              distinct.set(name.toLowerCase(), [
                ...(distinct.get(name.toLowerCase()) ?? []),
                ...(typeof value === 'string' ? [value] : value),
              ]);
            }
            const expected = gateway.match({
              method: r.method,
              host: r.host,
              path: target.path,
              header: (name) => distinct.get(name),
              clientIp: () => r.clientIp,
            });
            expect(result.path).toBe(target.path);
            expect(result.rule).toEqual(
              expected === undefined ? null : { id: expected.id, name: expected.name },
            );
            expect(result.limits.map((l) => l.name)).toEqual(expected?.limits.map((l) => l.name) ?? []);
            if (expected !== undefined) {
              chosen++;
              expect(result.considered[0]).toMatchObject({ name: expected.name, matched: true });
            } else {
              expect(result.considered.every((c) => !c.matched)).toBe(true);
            }
          }
        },
      ),
      { numRuns: 1000 },
    );
    // the generators must make both matches and refusals common, or the property says little
    expect(chosen / total).toBeGreaterThan(0.2);
    expect(refused / total).toBeGreaterThan(0.05);
  });
});
