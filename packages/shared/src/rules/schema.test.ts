import { describe, expect, it } from 'vitest';
import { checkRule, isRule, type RuleInput, validateRuleInput, withDefaults } from './schema.js';

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
    ['the SPEC example', valid()],
    ['a minimal rule', minimal],
    ['the root path with **', { ...minimal, match: { path: '/**' } }],
    ['a trailing slash', { ...minimal, match: { path: '/orders/' } }],
    ['a trailing slash after **', { ...minimal, match: { path: '/orders/**/' } }],
    ['* segments and literal segments containing *', { ...minimal, match: { path: '/a/*/b*/***x' } }],
    ['dots inside segments', { ...minimal, match: { path: '/v1.2/...' } }],
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
  const input: RuleInput = {
    name: 'a',
    match: { path: '/a' },
    limit: { capacity: 7, refill: 1, period: '1s' },
  };

  it('fills in every SPEC default', () => {
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
