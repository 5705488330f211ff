import { describe, expect, it } from 'vitest';
import { checkRule } from './check.js';
import { withDefaults } from './defaults.js';
import type { RuleInput, RuleInputV1 } from './schema.js';
import { isRule, validateRuleInput } from './validate.js';

// biome-ignore lint/suspicious/noExplicitAny: the corpus builds deliberately ill-typed bodies
type Body = any;

function valid(): Body {
  return {
    name: 'orders-per-key',
    description: 'Order API, per API key',
    match: { path: '/orders/**', methods: ['GET', 'POST'], host: 'api.example.com' },
    client: { by: 'header', name: 'x-api-key' },
    limit: { capacity: 100, refill: 100, period: '1m' },
    cost: 1,
    maxDebt: 100,
    enabled: true,
    shadow: false,
    priority: 0,
  };
}

/** [label, mutation of a valid body, the field the error must name] */
const invalid: Array<[string, (b: Body) => void, string]> = [
  ['unknown top-level field', (b) => (b.id = 'x'), 'id'],
  ['unknown top-level field (typo)', (b) => (b.maxdebt = 1), 'maxdebt'],
  ['unknown field in match', (b) => (b.match.regex = '.*'), 'match.regex'],
  ['unknown field in limit', (b) => (b.limit.burst = 5), 'limit.burst'],
  ['unknown field in client', (b) => (b.client.header = 'x'), 'client.header'],
  ['missing name', (b) => delete b.name, 'name'],
  ['missing match', (b) => delete b.match, 'match'],
  ['missing match.path', (b) => delete b.match.path, 'match.path'],
  ['missing limit', (b) => delete b.limit, 'limit'],
  ['missing limit.capacity', (b) => delete b.limit.capacity, 'limit.capacity'],
  ['missing limit.period', (b) => delete b.limit.period, 'limit.period'],
  ['name upper case', (b) => (b.name = 'Orders'), 'name'],
  ['name empty', (b) => (b.name = ''), 'name'],
  ['name starting with -', (b) => (b.name = '-orders'), 'name'],
  ['name with /', (b) => (b.name = 'a/b'), 'name'],
  ['name of 65 chars', (b) => (b.name = 'a'.repeat(65)), 'name'],
  ['name not a string', (b) => (b.name = 7), 'name'],
  ['path empty', (b) => (b.match.path = ''), 'match.path'],
  ['path without leading /', (b) => (b.match.path = 'orders/**'), 'match.path'],
  ['path with ?', (b) => (b.match.path = '/orders?id=1'), 'match.path'],
  ['path with #', (b) => (b.match.path = '/orders#x'), 'match.path'],
  ['path with %', (b) => (b.match.path = '/orders%2F1'), 'match.path'],
  ['path with \\', (b) => (b.match.path = '/orders\\1'), 'match.path'],
  ['path with space', (b) => (b.match.path = '/my orders'), 'match.path'],
  ['path with tab', (b) => (b.match.path = '/a\tb'), 'match.path'],
  ['path with NUL', (b) => (b.match.path = '/a\u0000b'), 'match.path'],
  ['path with ESC', (b) => (b.match.path = '/a\u001bb'), 'match.path'],
  ['path with DEL', (b) => (b.match.path = '/a\u007fb'), 'match.path'],
  ['path with NBSP', (b) => (b.match.path = '/a\u00a0b'), 'match.path'],
  ['path with ** not last', (b) => (b.match.path = '/a/**/b'), 'match.path'],
  ['path with ** first of two', (b) => (b.match.path = '/**/a'), 'match.path'],
  ['path with //', (b) => (b.match.path = '/a//b'), 'match.path'],
  ['path //', (b) => (b.match.path = '//'), 'match.path'],
  ['path ending //', (b) => (b.match.path = '/a//'), 'match.path'],
  ['path with . segment', (b) => (b.match.path = '/a/./b'), 'match.path'],
  ['path with .. segment', (b) => (b.match.path = '/a/../b'), 'match.path'],
  ['path ending in ..', (b) => (b.match.path = '/a/..'), 'match.path'],
  ['path of 513 chars', (b) => (b.match.path = `/${'a'.repeat(512)}`), 'match.path'],
  ['path not a string', (b) => (b.match.path = ['/a']), 'match.path'],
  ['unknown method', (b) => (b.match.methods = ['GET', 'FETCH']), 'match.methods.1'],
  ['lower-case method', (b) => (b.match.methods = ['get']), 'match.methods.0'],
  ['duplicate methods', (b) => (b.match.methods = ['GET', 'POST', 'GET']), 'match.methods'],
  ['methods not an array', (b) => (b.match.methods = 'GET'), 'match.methods'],
  ['host with _', (b) => (b.match.host = 'api_1.example.com'), 'match.host'],
  ['host with port', (b) => (b.match.host = 'api.example.com:8080'), 'match.host'],
  ['host with scheme', (b) => (b.match.host = 'https://api.example.com'), 'match.host'],
  ['host empty', (b) => (b.match.host = ''), 'match.host'],
  ['host ending with .', (b) => (b.match.host = 'example.com.'), 'match.host'],
  ['host with an empty label', (b) => (b.match.host = 'api..example.com'), 'match.host'],
  ['host label starting with -', (b) => (b.match.host = 'api.-example.com'), 'match.host'],
  ['host IPv6 without brackets', (b) => (b.match.host = '::1'), 'match.host'],
  ['capacity 0', (b) => (b.limit.capacity = 0), 'limit.capacity'],
  ['capacity negative', (b) => (b.limit.capacity = -5), 'limit.capacity'],
  ['capacity string', (b) => (b.limit.capacity = '100'), 'limit.capacity'],
  ['capacity above 1e12', (b) => (b.limit.capacity = 1e13), 'limit.capacity'],
  ['capacity NaN', (b) => (b.limit.capacity = Number.NaN), 'limit.capacity'],
  ['refill 0', (b) => (b.limit.refill = 0), 'limit.refill'],
  ['refill negative', (b) => (b.limit.refill = -1), 'limit.refill'],
  ['period "0s"', (b) => (b.limit.period = '0s'), 'limit.period'],
  ['period "1x"', (b) => (b.limit.period = '1x'), 'limit.period'],
  ['period 1.5', (b) => (b.limit.period = 1.5), 'limit.period'],
  ['period -1', (b) => (b.limit.period = -1), 'limit.period'],
  ['period 0', (b) => (b.limit.period = 0), 'limit.period'],
  ['period ""', (b) => (b.limit.period = ''), 'limit.period'],
  ['period "400d"', (b) => (b.limit.period = '400d'), 'limit.period'],
  ['period null', (b) => (b.limit.period = null), 'limit.period'],
  ['cost 0', (b) => (b.cost = 0), 'cost'],
  ['cost negative', (b) => (b.cost = -1), 'cost'],
  ['maxDebt -1', (b) => (b.maxDebt = -1), 'maxDebt'],
  ['maxDebt string', (b) => (b.maxDebt = '5'), 'maxDebt'],
  ['priority 1.5', (b) => (b.priority = 1.5), 'priority'],
  ['priority out of range', (b) => (b.priority = 2_000_000), 'priority'],
  ['description of 1001 chars', (b) => (b.description = 'x'.repeat(1001)), 'description'],
  ['description not a string', (b) => (b.description = 5), 'description'],
  ['client.by unknown', (b) => (b.client = { by: 'cookie' }), 'client.by'],
  ['client.by missing', (b) => (b.client = {}), 'client.by'],
  ['client not an object', (b) => (b.client = 'ip'), 'client'],
  ['header client without name', (b) => (b.client = { by: 'header' }), 'client.name'],
  ['header client with empty name', (b) => (b.client = { by: 'header', name: '' }), 'client.name'],
  ['header name with space', (b) => (b.client = { by: 'header', name: 'x api key' }), 'client.name'],
  ['header name with :', (b) => (b.client = { by: 'header', name: 'x-key:' }), 'client.name'],
  ['name on an ip client', (b) => (b.client = { by: 'ip', name: 'x-api-key' }), 'client.name'],
  ['name on a global client', (b) => (b.client = { by: 'global', name: 'x-api-key' }), 'client.name'],
  ['enabled "yes"', (b) => (b.enabled = 'yes'), 'enabled'],
  ['shadow 1', (b) => (b.shadow = 1), 'shadow'],
  [
    'cost above capacity + maxDebt (never admissible)',
    (b) => Object.assign(b, { cost: 150, maxDebt: 40 }),
    'cost',
  ],
  [
    'cost above capacity with the default maxDebt',
    (b) => Object.assign(b, { cost: 201, maxDebt: undefined }),
    'cost',
  ],
  ['capacity below one token for a unit cost', (b) => (b.limit.capacity = 0.5), 'limit.capacity'],
];

describe('validateRuleInput rejects', () => {
  it(`has a corpus of ${invalid.length} invalid inputs`, () => {
    expect(invalid.length).toBeGreaterThanOrEqual(30);
  });

  it.each(invalid)('%s, naming the field', (_label, mutate, field) => {
    const body = valid();
    mutate(body);
    const result = validateRuleInput(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors.map((e) => e.field)).toEqual([field]);
    for (const e of result.errors) expect(e.message).toMatch(/\S/);
  });

  it.each([null, 'rule', 42, [], undefined])('a body that is not an object (%j)', (body) => {
    const result = validateRuleInput(body);
    expect(result).toMatchObject({ ok: false, errors: [{ field: '(body)' }] });
  });

  it('names every bad field when several are wrong', () => {
    const body = valid();
    body.name = 'Bad';
    body.cost = 0;
    body.limit.refill = 0;
    const result = validateRuleInput(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors.map((e) => e.field).sort()).toEqual(['cost', 'limit.refill', 'name']);
  });

  // C1 controls (U+0080–U+009F) are control characters too, and JS `\s` does not cover NEL (U+0085)
  it('rejects a path with a C1 control character (U+0080, U+0085 NEL, U+009F)', () => {
    for (const path of ['/a\u0080b', '/a\u0085b', '/a\u009fb']) {
      const body = valid();
      body.match.path = path;
      expect(validateRuleInput(body), JSON.stringify(path)).toMatchObject({
        ok: false,
        errors: [{ field: 'match.path' }],
      });
    }
  });
});

describe('validateRuleInput accepts', () => {
  const minimal = { name: 'a', match: { path: '/' }, limit: { capacity: 1, refill: 1, period: 1 } };
  it.each<[string, Body]>([
    ['the documented example', valid()],
    ['a minimal rule', minimal],
    ['the root path with **', { ...minimal, match: { path: '/**' } }],
    ['a trailing slash', { ...minimal, match: { path: '/orders/' } }],
    ['a trailing slash after **', { ...minimal, match: { path: '/orders/**/' } }],
    ['* segments and literal segments containing *', { ...minimal, match: { path: '/a/*/b*/***x' } }],
    ['dots inside segments', { ...minimal, match: { path: '/v1.2/a.b' } }],
    ['non-ASCII literals', { ...minimal, match: { path: '/café/ü' } }],
    ['a path of 512 chars', { ...minimal, match: { path: `/${'a'.repeat(511)}` } }],
    ['empty methods (all)', { ...minimal, match: { path: '/', methods: [] } }],
    [
      'every method',
      {
        ...minimal,
        match: { path: '/', methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] },
      },
    ],
    ['an IPv6 host', { ...minimal, match: { path: '/', host: '[::1]' } }],
    ['an IPv4 host', { ...minimal, match: { path: '/', host: '10.0.0.1' } }],
    ['an upper-case host', { ...minimal, match: { path: '/', host: 'API.Example.COM' } }],
    ['a global client', { ...minimal, client: { by: 'global' } }],
    ['an ip client', { ...minimal, client: { by: 'ip' } }],
    ['an upper-case header client', { ...minimal, client: { by: 'header', name: 'X-Api-Key' } }],
    [
      'fractional capacity, refill and cost',
      { ...minimal, limit: { capacity: 0.5, refill: 0.25, period: '1.5s' }, cost: 0.1 },
    ],
    ['maxDebt 0', { ...minimal, maxDebt: 0 }],
    ['period of one year', { ...minimal, limit: { capacity: 1, refill: 1, period: '365d' } }],
    ['negative priority', { ...minimal, priority: -1_000_000 }],
    ['a name of 64 chars', { ...minimal, name: `a${'.-_9'.repeat(15)}abc` }],
    ['a description of 1000 chars', { ...minimal, description: 'x'.repeat(1000) }],
  ])('%s', (_label, body) => {
    const before = JSON.stringify(body);
    const result = validateRuleInput(body);
    expect(result).toEqual({ ok: true, value: body });
    expect(JSON.stringify(body)).toBe(before);
    expect(checkRule(body)).toEqual([]);
  });
});

describe('withDefaults', () => {
  const input: RuleInputV1 = {
    name: 'a',
    match: { path: '/a' },
    limit: { capacity: 7, refill: 1, period: '1s' },
  };

  it('fills in every documented default', () => {
    expect(withDefaults(input)).toEqual({
      name: 'a',
      match: { path: '/a' },
      client: { by: 'ip' },
      limit: { capacity: 7, refill: 1, period: '1s' },
      cost: 1,
      maxDebt: 7,
      enabled: true,
      shadow: false,
      priority: 0,
    });
  });

  it('keeps given values, lowercases header name and host', () => {
    const full: RuleInput = {
      name: 'b',
      description: 'd',
      match: { path: '/b/**', methods: ['GET'], host: 'API.Example.com' },
      client: { by: 'header', name: 'X-Api-Key' },
      limit: { capacity: 10, refill: 2, period: 500 },
      cost: 3,
      maxDebt: 0,
      enabled: false,
      shadow: true,
      priority: -4,
    };
    expect(withDefaults(full)).toEqual({
      ...full,
      match: { path: '/b/**', methods: ['GET'], host: 'api.example.com' },
      client: { by: 'header', name: 'x-api-key' },
    });
  });

  it('lets maxDebt follow the capacity of each input (a PUT that omits it)', () => {
    expect(withDefaults({ ...input, limit: { ...input.limit, capacity: 50 } }).maxDebt).toBe(50);
  });

  it('keeps the global client and does not share the limit object', () => {
    const out = withDefaults({ ...input, client: { by: 'global' } });
    expect(out.client).toEqual({ by: 'global' });
    expect(out.limit).not.toBe(input.limit);
  });

  it('produces a stored rule the gateway accepts once the server fields are added', () => {
    const stored = {
      ...withDefaults(input),
      id: '0b6f3c1e-0000-4000-8000-000000000001',
      version: 1,
      createdAt: '2026-11-25T12:00:00.000Z',
      updatedAt: '2026-11-25T12:30:00.000Z',
    };
    expect(isRule(stored)).toBe(true);
    expect(isRule({ ...stored, extra: 1 })).toBe(false);
    expect(isRule({ ...stored, version: 0 })).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// Format 2, conditions, exemptions and hardening

/** The stacked example of docs/rules.md, minus the features not enforced yet. */
function validV2(): Body {
  return {
    name: 'orders',
    match: {
      path: '/orders/**',
      methods: ['POST'],
      headers: { 'X-Tier': 'free' },
      clientIps: ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7'],
    },
    limits: [
      {
        name: 'burst',
        client: { by: 'header', name: 'x-api-key' },
        algorithm: 'token-bucket',
        capacity: 20,
        refill: 10,
        period: '1s',
        maxDebt: 20,
      },
      {
        name: 'daily',
        client: { by: 'header', name: 'x-api-key' },
        algorithm: 'sliding-window',
        max: 10000,
        window: '1d',
      },
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1000, period: '1s' },
    ],
    cost: 1,
    mode: 'exact',
  };
}

const invalidV2: Array<[string, (b: Body) => void, string, RegExp?]> = [
  ['limit together with limits', (b) => (b.limit = { capacity: 1, refill: 1, period: '1s' }), 'limit'],
  ['client together with limits', (b) => (b.client = { by: 'ip' }), 'client'],
  ['maxDebt together with limits', (b) => (b.maxDebt = 5), 'maxDebt'],
  ['unlimited together with limits', (b) => (b.unlimited = true), 'unlimited'],
  ['unlimited: false together with limits', (b) => (b.unlimited = false), 'unlimited'],
  ['no limits at all', (b) => delete b.limits, 'limit'],
  ['unlimited: false alone', (b) => Object.assign(delete b.limits && b, { unlimited: false }), 'limit'],
  ['empty limits', (b) => (b.limits = []), 'limits'],
  [
    'nine limits',
    (b) => (b.limits = Array.from({ length: 9 }, (_, i) => ({ ...b.limits[2], name: `l${i}` }))),
    'limits',
  ],
  ['limit without name', (b) => delete b.limits[0].name, 'limits.0.name'],
  ['limit name with a dot', (b) => (b.limits[1].name = 'a.b'), 'limits.1.name'],
  ['limit name upper case', (b) => (b.limits[1].name = 'Daily'), 'limits.1.name'],
  ['limit name of 33 chars', (b) => (b.limits[1].name = 'a'.repeat(33)), 'limits.1.name'],
  ['duplicate limit names', (b) => (b.limits[2].name = 'burst'), 'limits.2.name', /unique/],
  ['unknown algorithm', (b) => (b.limits[0].algorithm = 'leaky-bucket'), 'limits.0.algorithm'],
  ['unknown field in a limit', (b) => (b.limits[0].burst = 5), 'limits.0.burst'],
  [
    'sliding-window field on a token bucket',
    (b) => (b.limits[0].window = '1m'),
    'limits.0.window',
    /token-bucket/,
  ],
  ['max on a default (token-bucket) limit', (b) => (b.limits[2].max = 5), 'limits.2.max', /defaults/],
  ['capacity on a sliding window', (b) => (b.limits[1].capacity = 5), 'limits.1.capacity', /sliding-window/],
  ['maxDebt on a sliding window', (b) => (b.limits[1].maxDebt = 5), 'limits.1.maxDebt'],
  ['token bucket without capacity', (b) => delete b.limits[0].capacity, 'limits.0.capacity', /required/],
  ['token bucket without period', (b) => delete b.limits[2].period, 'limits.2.period', /required/],
  ['sliding window without window', (b) => delete b.limits[1].window, 'limits.1.window', /required/],
  ['sliding window without max', (b) => delete b.limits[1].max, 'limits.1.max', /required/],
  ['bad window', (b) => (b.limits[1].window = '2y'), 'limits.1.window'],
  ['window over a year', (b) => (b.limits[1].window = '366d'), 'limits.1.window'],
  ['period 0 in a limit', (b) => (b.limits[0].period = 0), 'limits.0.period'],
  ['capacity 0 in a limit', (b) => (b.limits[0].capacity = 0), 'limits.0.capacity'],
  ['capacity 1e-300 in a limit', (b) => (b.limits[0].capacity = 1e-300), 'limits.0.capacity'],
  ['refill 1e-300 in a limit', (b) => (b.limits[0].refill = 1e-300), 'limits.0.refill'],
  ['max 1e-300 in a sliding window', (b) => (b.limits[1].max = 1e-300), 'limits.1.max'],
  ['limit cost 1e-300', (b) => (b.limits[1].cost = 1e-300), 'limits.1.cost'],
  ['limit cost above its max', (b) => (b.limits[1].cost = 10001), 'limits.1.cost', /no request could pass/],
  [
    'rule cost above a limit max',
    (b) => {
      b.cost = 50;
      b.limits[1].max = 10;
    },
    'cost',
  ],
  ['limit cost above capacity + maxDebt', (b) => (b.limits[0].cost = 41), 'limits.0.cost'],
  [
    'limit client header without name',
    (b) => (b.limits[0].client = { by: 'header' }),
    'limits.0.client.name',
  ],
  ['limit client name on ip', (b) => (b.limits[2].client = { by: 'ip', name: 'x' }), 'limits.2.client.name'],
  [
    'cost on concurrency',
    (b) => (b.limits[2] = { name: 'c', algorithm: 'concurrency', max: 5, cost: 2 }),
    'limits.2.cost',
    /one slot/,
  ],
  [
    'fractional concurrency max',
    (b) => (b.limits[2] = { name: 'c', algorithm: 'concurrency', max: 1.5 }),
    'limits.2.max',
    /integer/,
  ],
  [
    'charge on a rule with only concurrency limits',
    (b) => {
      b.limits = [{ name: 'c', algorithm: 'concurrency', max: 5 }];
      b.charge = { from: 'header', header: 'x-sluice-cost' };
    },
    'charge',
    /token-bucket or sliding-window/,
  ],
  [
    'refund on a rule with only concurrency limits',
    (b) => {
      b.limits = [{ name: 'c', algorithm: 'concurrency', max: 5 }];
      b.refund = { statuses: ['5xx'] };
    },
    'refund',
    /token-bucket or sliding-window/,
  ],
  ['charge from header without header', (b) => (b.charge = { from: 'header' }), 'charge.header'],
  [
    'charge unitMs with from bytes',
    (b) => (b.charge = { from: 'bytes', unitBytes: 1024, unitMs: 5 }),
    'charge.unitMs',
  ],
  ['charge from an unknown source', (b) => (b.charge = { from: 'body' }), 'charge.from'],
  ['charge max 1e-300', (b) => (b.charge = { from: 'duration', unitMs: 100, max: 1e-300 }), 'charge.max'],
  ['refund status 600', (b) => (b.refund = { statuses: [600] }), 'refund.statuses.0'],
  ['refund class 6xx', (b) => (b.refund = { statuses: [500, '6xx'] }), 'refund.statuses.1'],
  ['refund without statuses', (b) => (b.refund = { statuses: [] }), 'refund.statuses'],
  ['unknown mode', (b) => (b.mode = 'fast'), 'mode'],
  [
    'header condition name with space',
    (b) => (b.match.headers = { 'x tier': 'free' }),
    'match.headers.x tier',
  ],
  ['header condition value not a string', (b) => (b.match.headers = { 'x-tier': 1 }), 'match.headers.x-tier'],
  [
    'header condition value with a newline',
    (b) => (b.match.headers = { 'x-tier': 'a\nb' }),
    'match.headers.x-tier',
  ],
  [
    'header condition value with outer space',
    (b) => (b.match.headers = { 'x-tier': ' free' }),
    'match.headers.x-tier',
  ],
  [
    'header condition value non-ASCII',
    (b) => (b.match.headers = { 'x-tier': 'grün' }),
    'match.headers.x-tier',
  ],
  [
    'header condition named twice',
    (b) => (b.match.headers = { 'X-Tier': 'a', 'x-tier': 'b' }),
    'match.headers.x-tier',
    /same header/,
  ],
  ['empty header conditions', (b) => (b.match.headers = {}), 'match.headers'],
  [
    '17 header conditions',
    (b) => (b.match.headers = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`x-${i}`, 'v']))),
    'match.headers',
  ],
  [
    'clientIps item not an IP',
    (b) => (b.match.clientIps = ['203.0.113.0/24', '10.0.0.0/8', 'example.com']),
    'match.clientIps.2',
  ],
  ['clientIps v4 prefix 33', (b) => (b.match.clientIps = ['10.0.0.0/33']), 'match.clientIps.0'],
  ['clientIps v6 prefix 129', (b) => (b.match.clientIps = ['::/0', '2001:db8::/129']), 'match.clientIps.1'],
  ['clientIps prefix with a sign', (b) => (b.match.clientIps = ['10.0.0.0/+8']), 'match.clientIps.0'],
  ['clientIps leading-zero IPv4', (b) => (b.match.clientIps = ['010.0.0.1']), 'match.clientIps.0'],
  ['clientIps with a zone id', (b) => (b.match.clientIps = ['fe80::1%eth0']), 'match.clientIps.0'],
  ['clientIps empty', (b) => (b.match.clientIps = []), 'match.clientIps'],
  ['clientIps not an array', (b) => (b.match.clientIps = '10.0.0.0/8'), 'match.clientIps'],
  ['notClientIps item not an IP', (b) => (b.match.notClientIps = ['1.2.3']), 'match.notClientIps.0'],
  ['caseInsensitive not a boolean', (b) => (b.match.caseInsensitive = 'yes'), 'match.caseInsensitive'],
];

describe('validateRuleInput: concurrency, charge and refund (docs/lifecycle.md)', () => {
  it('accepts the stacked example whole: a concurrency limit, charge from a header, refunds', () => {
    const body = validV2();
    body.limits.push({
      name: 'inflight',
      client: { by: 'header', name: 'x-api-key' },
      algorithm: 'concurrency',
      max: 5,
    });
    body.charge = { from: 'header', header: 'x-sluice-cost', max: 100 };
    body.refund = { statuses: ['5xx', 429] };
    const result = validateRuleInput(body);
    expect(result.ok).toBe(true);
  });

  it.each([[{ from: 'duration', unitMs: 100 }], [{ from: 'bytes', unitBytes: 1024, max: 50 }]])(
    'accepts charge %j',
    (charge) => {
      const body = validV2();
      body.charge = charge;
      expect(validateRuleInput(body).ok).toBe(true);
    },
  );
});

describe('validateRuleInput rejects format-2 mistakes, naming the field', () => {
  it.each(invalidV2)('%s', (_label, mutate, field, message) => {
    const body = validV2();
    mutate(body);
    const result = validateRuleInput(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors.map((e) => e.field)).toContain(field);
    const error = result.errors.find((e) => e.field === field)!;
    if (message) expect(error.message).toMatch(message);
  });
});

describe('validateRuleInput: unlimited rules', () => {
  const exemption = {
    name: 'campaign-eu',
    match: { path: '/orders/**', clientIps: ['203.0.113.0/24'] },
    unlimited: true,
    priority: 10,
  };

  it('accepts an exemption and stores it with no limit fields', () => {
    expect(validateRuleInput(exemption)).toEqual({ ok: true, value: exemption });
    expect(withDefaults(exemption)).toEqual({
      name: 'campaign-eu',
      match: { path: '/orders/**', clientIps: ['203.0.113.0/24'] },
      unlimited: true,
      enabled: true,
      shadow: false,
      priority: 10,
    });
  });

  it.each([
    ['limit', { limit: { capacity: 1, refill: 1, period: '1s' } }, 'unlimited'],
    ['limits', { limits: [{ name: 'a', capacity: 1, refill: 1, period: '1s' }] }, 'unlimited'],
    ['client', { client: { by: 'ip' } }, 'client'],
    ['cost', { cost: 2 }, 'cost'],
    ['maxDebt', { maxDebt: 2 }, 'maxDebt'],
    ['mode', { mode: 'exact' }, 'mode'],
    ['refund', { refund: { statuses: [503] } }, 'refund'],
  ])('refuses unlimited with %s', (_label, extra, field) => {
    const result = validateRuleInput({ ...exemption, ...extra });
    expect(result).toMatchObject({ ok: false, errors: [{ field }] });
  });
});

describe('hardening', () => {
  // issue 12, bypass 4: `__proto__` keyed every request `h:[object Object]`
  it.each(['__proto__', 'constructor', 'toString', 'HasOwnProperty', 'valueof', '__defineGetter__'])(
    'refuses the object-prototype header name %s wherever a header is named',
    (name) => {
      const v1 = valid();
      v1.client = { by: 'header', name };
      expect(validateRuleInput(v1)).toMatchObject({ ok: false, errors: [{ field: 'client.name' }] });
      const v2 = validV2();
      v2.limits[0].client = { by: 'header', name };
      expect(validateRuleInput(v2)).toMatchObject({ ok: false, errors: [{ field: 'limits.0.client.name' }] });
      const cond = validV2();
      // JSON.parse makes `__proto__` an own key, as a request body would
      cond.match.headers = JSON.parse(`{${JSON.stringify(name)}: "x"}`);
      expect(validateRuleInput(cond)).toMatchObject({
        ok: false,
        errors: [{ field: `match.headers.${name}` }],
      });
    },
  );

  // issue 12, bypass 3: a right-to-left override makes a rule path read differently than it matches
  it.each(['\u202e', '\u202a', '\u2066', '\u2069', '\u200e', '\u200f', '\u061c'])(
    'refuses a bidirectional control (U+%s) in match.path',
    (ch) => {
      const body = valid();
      body.match.path = `/admin${ch}/x`;
      const result = validateRuleInput(body);
      expect(result).toMatchObject({ ok: false, errors: [{ field: 'match.path' }] });
      if (!result.ok) expect(result.errors[0]!.message).toMatch(/bidirectional/);
    },
  );

  // a rule for a spelling the gateway refuses on the wire would silently never match
  it.each([
    ['/admin;x=1', 'PATH_PARAMETERS'],
    ['/admin./x', 'PATH_TRAILING_DOT_OR_SPACE'],
    ['/foo/\uff0e\uff0e/admin', 'PATH_CONFUSABLE_CHARACTER'],
    ['/a\u2215b', 'PATH_CONFUSABLE_CHARACTER'],
  ])('refuses match.path %s, which the gateway answers with 400 %s', (path, code) => {
    const body = valid();
    body.match.path = JSON.parse(`"${path}"`);
    const result = validateRuleInput(body);
    expect(result).toMatchObject({ ok: false, errors: [{ field: 'match.path' }] });
    if (!result.ok) expect(result.errors[0]!.message).toContain(code);
  });

  it('refuses a lone surrogate in match.path (it has no UTF-8 form to match)', () => {
    const body = valid();
    body.match.path = '/a\ud800b';
    expect(validateRuleInput(body)).toMatchObject({ ok: false, errors: [{ field: 'match.path' }] });
    body.match.path = '/a\u{1f600}b';
    expect(validateRuleInput(body).ok).toBe(true);
  });

  // issue 12, "cost: 1e-300 is accepted and never limits anything"
  it.each<[string, (b: Body) => void, string]>([
    ['cost 1e-300', (b) => (b.cost = 1e-300), 'cost'],
    ['cost 0.0009', (b) => (b.cost = 0.0009), 'cost'],
    ['capacity 1e-300', (b) => (b.limit.capacity = 1e-300), 'limit.capacity'],
    ['refill 1e-300', (b) => (b.limit.refill = 1e-300), 'limit.refill'],
    ['refill 0.0009', (b) => (b.limit.refill = 0.0009), 'limit.refill'],
  ])('refuses %s (below a thousandth of a token)', (_label, mutate, field) => {
    const body = valid();
    mutate(body);
    expect(validateRuleInput(body)).toMatchObject({ ok: false, errors: [{ field }] });
  });

  it('accepts a thousandth of a token', () => {
    const body = { ...valid(), cost: 0.001, limit: { capacity: 1, refill: 0.001, period: '1s' } };
    expect(validateRuleInput(body).ok).toBe(true);
  });

  it('accepts match.caseInsensitive on either form', () => {
    const v1 = valid();
    v1.match.caseInsensitive = true;
    expect(validateRuleInput(v1).ok).toBe(true);
    expect(withDefaults(v1).match.caseInsensitive).toBe(true);
    const v2 = validV2();
    v2.match.caseInsensitive = false;
    expect(validateRuleInput(v2).ok).toBe(true);
  });
});

describe('validateRuleInput accepts format 2', () => {
  it('the stacked example (burst + daily per key + global cap), with mode exact', () => {
    const body = validV2();
    const before = JSON.stringify(body);
    expect(validateRuleInput(body)).toEqual({ ok: true, value: body });
    expect(JSON.stringify(body)).toBe(before);
  });

  it('conditions on a format-1 rule, and one-limit format-2 rules with each algorithm', () => {
    const v1 = valid();
    v1.match.headers = { 'x-tier': 'free' };
    v1.match.notClientIps = ['10.0.0.0/8'];
    expect(validateRuleInput(v1).ok).toBe(true);
    for (const limit of [
      { name: 'a', capacity: 1, refill: 1, period: 1 },
      { name: 'b_2', algorithm: 'sliding-window', max: 0.5, window: 60000, cost: 0.5 },
    ]) {
      expect(validateRuleInput({ name: 'x', match: { path: '/' }, limits: [limit] }).ok).toBe(true);
    }
  });

  it('eight limits', () => {
    const limits = Array.from({ length: 8 }, (_, i) => ({
      name: `l${i}`,
      capacity: 1,
      refill: 1,
      period: '1s',
    }));
    expect(validateRuleInput({ name: 'x', match: { path: '/' }, limits }).ok).toBe(true);
  });
});

describe('withDefaults: format 2 and round trips', () => {
  it('fills client, algorithm and maxDebt inside each limit and the rule cost, lowercases header names', () => {
    const body = validV2();
    delete body.cost;
    delete body.mode;
    expect(withDefaults(body)).toEqual({
      name: 'orders',
      match: {
        path: '/orders/**',
        methods: ['POST'],
        headers: { 'x-tier': 'free' },
        clientIps: ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7'],
      },
      limits: [
        {
          name: 'burst',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'token-bucket',
          capacity: 20,
          refill: 10,
          period: '1s',
          maxDebt: 20,
        },
        {
          name: 'daily',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'sliding-window',
          max: 10000,
          window: '1d',
        },
        {
          name: 'everyone',
          client: { by: 'global' },
          algorithm: 'token-bucket',
          capacity: 1000,
          refill: 1000,
          period: '1s',
          maxDebt: 1000,
        },
      ],
      cost: 1,
      enabled: true,
      shadow: false,
      priority: 0,
    });
  });

  it('keeps optional rule-level fields only when written', () => {
    expect(withDefaults(validV2())).toMatchObject({ mode: 'exact' });
    expect(withDefaults({ ...validV2(), mode: 'lease' })).toMatchObject({ mode: 'lease' });
    const { mode: _mode, ...rest } = validV2();
    expect('mode' in withDefaults(rest)).toBe(false);
    expect('charge' in withDefaults(rest)).toBe(false);
  });

  it('returns a format-1 rule exactly as before: same keys, same order, no new keys', () => {
    const out = withDefaults(valid());
    expect(Object.keys(out)).toEqual([
      'name',
      'description',
      'match',
      'client',
      'limit',
      'cost',
      'maxDebt',
      'enabled',
      'shadow',
      'priority',
    ]);
    expect(JSON.stringify(out)).toBe(JSON.stringify({ ...valid(), match: valid().match }));
  });

  it('is idempotent: a stored rule fed back as input gives the same rule (export → apply)', () => {
    for (const body of [valid(), validV2(), { name: 'free', match: { path: '/**' }, unlimited: true }]) {
      const once = withDefaults(body);
      expect(validateRuleInput(once).ok).toBe(true);
      expect(withDefaults(once as RuleInput)).toEqual(once);
    }
  });

  it('gives stored rules of every form that isRule accepts, and isRule tells the forms apart', () => {
    const server = {
      id: '0b6f3c1e-0000-4000-8000-000000000001',
      version: 1,
      createdAt: '2026-11-25T12:00:00.000Z',
      updatedAt: '2026-11-25T12:30:00.000Z',
    };
    const v1 = { ...withDefaults(valid()), ...server };
    const v2 = { ...withDefaults(validV2()), ...server };
    const free = { ...withDefaults({ name: 'f', match: { path: '/' }, unlimited: true }), ...server };
    expect([isRule(v1), isRule(v2), isRule(free)]).toEqual([true, true, true]);
    expect(isRule({ ...v2, limit: { capacity: 1, refill: 1, period: '1s' } })).toBe(false);
    expect(isRule({ ...v2, client: { by: 'ip' } })).toBe(false);
    expect(isRule({ ...free, cost: 1 })).toBe(false);
    expect(isRule({ ...free, unlimited: false })).toBe(false);
    const noAlgorithm = structuredClone(v2) as Body;
    delete noAlgorithm.limits[0].algorithm;
    expect(isRule(noAlgorithm)).toBe(false);
  });
});

describe('docs/rules.md', () => {
  it('has only examples the rules API accepts', async () => {
    const { readFile } = await import('node:fs/promises');
    const text = await readFile(new URL('../../../../docs/rules.md', import.meta.url), 'utf8');
    const blocks = [...text.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]!));
    expect(blocks.length).toBeGreaterThanOrEqual(3);
    for (const body of blocks) expect(validateRuleInput(body), body.name).toMatchObject({ ok: true });
  });
});

describe('validateRuleInput: lease mode', () => {
  it('accepts mode "lease" on either form (it is enforced: see the gateway lease manager)', () => {
    expect(validateRuleInput({ ...validV2(), mode: 'lease' }).ok).toBe(true);
    expect(validateRuleInput({ ...valid(), mode: 'lease' }).ok).toBe(true);
  });
});
