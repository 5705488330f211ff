/**
 * Verified identity in the rule format (docs/rules.md, "Verified identity and secret client keys"):
 * `client.by: "jwt"`, `match.claims`, `match.authenticated`, secret header clients, and what the
 * decision core keys each request by. Pure: the verifier's tests (verifier.test.ts) use real tokens.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecisionCore, PREVIEW } from '../decision/core.js';
import { compileExplainer } from '../decision/explain.js';
import type { RequestFacts } from '../decision/facts.js';
import { checkRule } from '../rules/check.js';
import { withDefaults } from '../rules/defaults.js';
import { compileRules } from '../rules/match.js';
import type { Rule, RuleInput } from '../rules/schema.js';
import { validateRuleInput } from '../rules/validate.js';
import { claimMatches, jwtClientKey, type VerifiedClaims } from './claims.js';
import { isSecretClientKey, SecretClientKeys } from './secret-keys.js';

let nextId = 0;
function stored(input: RuleInput): Rule {
  const valid = validateRuleInput(input);
  if (!valid.ok) throw new Error(JSON.stringify(valid.errors));
  nextId++;
  return {
    ...withDefaults(valid.value),
    id: `00000000-0000-4000-8000-${String(nextId).padStart(12, '0')}`,
    version: 1,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  } as Rule;
}

function facts(
  claims: VerifiedClaims | undefined,
  headers: Record<string, string> = {},
  path = '/api/x',
): RequestFacts {
  return {
    method: 'GET',
    host: 'example.com',
    path,
    header: (name) => (headers[name] === undefined ? undefined : [headers[name]!]),
    joinedHeader: (name) => headers[name],
    clientIp: () => '203.0.113.7',
    claims: () => claims,
  };
}

function preview(rules: Rule[], request: RequestFacts, secret?: string) {
  const core = new DecisionCore({ secretKeys: new SecretClientKeys(secret) });
  core.setRules(compileRules(rules));
  const decision = core.decide(request, PREVIEW);
  return decision.kind === 'preview'
    ? { rule: decision.rule.name, keys: decision.clientKeys }
    : { rule: decision.kind === 'unlimited' ? decision.rule.name : undefined, keys: [] };
}

const bucket = { capacity: 10, refill: 10, period: '1s' };

describe('the rule format: jwt clients, claims and authenticated', () => {
  it('stores `client.by: "jwt"` with its claim, `sub` by default', () => {
    expect(stored({ name: 'a', match: { path: '/a' }, client: { by: 'jwt' }, limit: bucket })).toMatchObject({
      client: { by: 'jwt', claim: 'sub' },
    });
    const v2 = stored({
      name: 'b',
      match: { path: '/b' },
      limits: [{ name: 'org', client: { by: 'jwt', claim: 'org_id' }, ...bucket }],
    });
    expect(v2).toMatchObject({ limits: [{ client: { by: 'jwt', claim: 'org_id' } }] });
  });

  it('keeps header clients written before `secret` existed exactly as they were', () => {
    const rule = stored({
      name: 'c',
      match: { path: '/c' },
      client: { by: 'header', name: 'X-Api-Key' },
      limit: bucket,
    });
    expect(rule).toMatchObject({ client: { by: 'header', name: 'x-api-key' } });
    expect('secret' in (rule as { client: object }).client).toBe(false);
  });

  it.each([
    [{ client: { by: 'ip', claim: 'sub' } }, 'client.claim'],
    [{ client: { by: 'jwt', name: 'x' } }, 'client.name'],
    [{ client: { by: 'jwt', secret: true } }, 'client.secret'],
    [{ client: { by: 'jwt', claim: '__proto__' } }, 'client.claim'],
    [{ client: { by: 'jwt', claim: 'has space' } }, 'client.claim'],
    [{ match: { path: '/d', claims: { constructor: 'x' } } }, 'match.claims.constructor'],
    [{ match: { path: '/d', claims: {} } }, 'match.claims'],
    [{ match: { path: '/d', claims: { plan: { nested: 1 } } } }, 'match.claims.plan'],
    [{ match: { path: '/d', claims: { roles: [] } } }, 'match.claims.roles'],
    [{ match: { path: '/d', authenticated: 'yes' } }, 'match.authenticated'],
  ])('refuses %j naming %s', (extra, field) => {
    const input = { name: 'd', match: { path: '/d' }, limit: bucket, ...extra };
    const valid = validateRuleInput(input);
    const errors = valid.ok ? checkRule(valid.value) : valid.errors;
    expect(errors.map((e) => e.field)).toContain(field);
  });

  it('counts each claims entry and authenticated as conditions in precedence', () => {
    const rules = [
      stored({ name: 'a-plain', match: { path: '/api/**' }, limit: bucket }),
      stored({ name: 'z-pro', match: { path: '/api/**', claims: { plan: 'pro' } }, limit: bucket }),
      stored({
        name: 'zz-pro-admin',
        match: { path: '/api/**', claims: { plan: 'pro', roles: 'admin' }, authenticated: true },
        limit: bucket,
      }),
    ];
    expect(preview(rules, facts({ sub: 'a', plan: 'pro', roles: ['admin', 'x'] })).rule).toBe('zz-pro-admin');
    expect(preview(rules, facts({ sub: 'a', plan: 'pro', roles: ['x'] })).rule).toBe('z-pro');
    expect(preview(rules, facts({ sub: 'a', plan: 'free' })).rule).toBe('a-plain');
    // without a verified token, no claim condition holds
    expect(preview(rules, facts(undefined, { 'x-plan': 'pro' })).rule).toBe('a-plain');
  });

  it('takes `authenticated: true` only with a verified token and `false` only without', () => {
    const rules = [
      stored({ name: 'in', match: { path: '/api/**', authenticated: true }, limit: bucket }),
      stored({ name: 'out', match: { path: '/api/**', authenticated: false }, limit: bucket }),
    ];
    expect(preview(rules, facts({ sub: 'a' })).rule).toBe('in');
    expect(preview(rules, facts(undefined)).rule).toBe('out');
  });

  it('keys a jwt limit by the claim of a verified token, and by IP without one', () => {
    const rules = [
      stored({
        name: 'per-org',
        match: { path: '/api/**' },
        limits: [
          { name: 'sub', client: { by: 'jwt' }, ...bucket },
          { name: 'org', client: { by: 'jwt', claim: 'org_id' }, ...bucket },
        ],
      }),
    ];
    expect(preview(rules, facts({ sub: 'alice', org_id: 42 })).keys).toEqual(['jwt:alice', 'jwt:42']);
    expect(preview(rules, facts({ sub: 'alice', org_id: { id: 1 } })).keys).toEqual([
      'jwt:alice',
      'ip:203.0.113.7',
    ]);
    expect(preview(rules, facts(undefined, { authorization: 'Bearer x' })).keys).toEqual([
      'ip:203.0.113.7',
      'ip:203.0.113.7',
    ]);
  });

  it('treats claim values that look like prototype keys as plain values', () => {
    const rules = [
      stored({
        name: 'p',
        match: { path: '/api/**', claims: { plan: ['__proto__', 'constructor'] } },
        client: { by: 'jwt' },
        limit: bucket,
      }),
    ];
    const claims = JSON.parse('{"sub":"__proto__","plan":"constructor"}') as VerifiedClaims;
    expect(preview(rules, facts(claims))).toEqual({ rule: 'p', keys: ['jwt:__proto__'] });
    expect(preview(rules, facts({ sub: 'toString' })).rule).toBeUndefined();
    expect(jwtClientKey({}, 'constructor')).toBeUndefined();
    expect(jwtClientKey({}, '__proto__')).toBeUndefined();
  });

  it('claimMatches: equal values of the same type, or a list claim holding one (property)', () => {
    const scalar = fc.oneof(fc.string({ maxLength: 5 }), fc.integer(), fc.boolean());
    fc.assert(
      fc.property(scalar, fc.array(scalar, { minLength: 1, maxLength: 4 }), (actual, wanted) => {
        expect(claimMatches(actual, wanted)).toBe(wanted.some((w) => w === actual));
        expect(claimMatches([actual], wanted)).toBe(wanted.some((w) => w === actual));
        expect(claimMatches(undefined, wanted)).toBe(false);
      }),
    );
    expect(claimMatches(1, '1')).toBe(false);
    expect(claimMatches('true', true)).toBe(false);
  });
});

describe('secret client keys', () => {
  const keyRule = (client: RuleInput['client']) =>
    stored({ name: `k${nextId}`, match: { path: '/api/**' }, client, limit: bucket });

  it('keys a credential header as header:~<24 hex of its HMAC>, never in clear', () => {
    const raw = 'sk_live_0123456789';
    for (const name of ['x-api-key', 'authorization', 'cookie', 'api-key', 'x-auth-token']) {
      const { keys } = preview([keyRule({ by: 'header', name })], facts(undefined, { [name]: raw }), 's1');
      expect(keys[0]).toMatch(/^header:~[0-9a-f]{24}$/);
      expect(keys[0]).not.toContain(raw);
    }
  });

  it('keys the same value alike under one secret and differently under another', () => {
    const rule = keyRule({ by: 'header', name: 'x-api-key' });
    const request = facts(undefined, { 'x-api-key': 'k1' });
    const a = preview([rule], request, 'one').keys[0];
    expect(preview([rule], request, 'one').keys[0]).toBe(a);
    expect(preview([rule], request, 'two').keys[0]).not.toBe(a);
    expect(new SecretClientKeys('one').lookupKey('header:k1', true)).toBe(a);
    // a key already hashed is looked up as it is
    expect(new SecretClientKeys('one').lookupKey(a!, true)).toBe(a);
  });

  it('`secret: true` makes any header a credential; `secret: false` shows a listed one in clear', () => {
    const tenant = keyRule({ by: 'header', name: 'x-tenant', secret: true });
    expect(preview([tenant], facts(undefined, { 'x-tenant': 't1' })).keys[0]).toMatch(/^header:~/);
    const open = keyRule({ by: 'header', name: 'x-api-key', secret: false });
    expect(preview([open], facts(undefined, { 'x-api-key': 'k1' })).keys[0]).toBe('header:k1');
    const plain = keyRule({ by: 'header', name: 'x-tenant' });
    expect(preview([plain], facts(undefined, { 'x-tenant': 't1' })).keys[0]).toBe('header:t1');
  });

  it('without CLIENT_KEY_SECRET hashes with plain SHA-256', () => {
    const keys = new SecretClientKeys(undefined);
    expect(keys.keyed).toBe(false);
    const sha = createHash('sha256').update('k1').digest('hex').slice(0, 24);
    expect(keys.clientKey('k1')).toBe(`header:~${sha}`);
    expect(isSecretClientKey(keys.clientKey('k1')!)).toBe(true);
  });
});

describe('explain with an identity', () => {
  const rules = [
    stored({ name: 'plain', match: { path: '/api/**' }, client: { by: 'jwt' }, limit: bucket }),
    stored({
      name: 'pro',
      match: { path: '/api/**', claims: { plan: 'pro' } },
      client: { by: 'jwt' },
      limit: bucket,
    }),
    stored({ name: 'members', match: { path: '/api/**', authenticated: true }, limit: bucket }),
    stored({
      name: 'keyed',
      match: { path: '/keys/**' },
      client: { by: 'header', name: 'x-api-key' },
      limit: bucket,
    }),
  ];
  const explainer = compileExplainer(rules, { secretKeys: new SecretClientKeys('explain') });

  it('keys and matches with the verified claims it was given, and says why others failed', () => {
    const result = explainer.explain({
      method: 'GET',
      path: '/api/x',
      identity: { authenticated: true, claims: { sub: 'alice', plan: 'free' } },
    });
    expect(result.rule?.name).toBe('members');
    expect(result.identity).toEqual({ authenticated: true, claims: { sub: 'alice', plan: 'free' } });
    expect(result.considered.find((c) => c.name === 'pro')?.reason).toBe('claim plan is "free", not "pro"');
  });

  it('without a verified token: keyed by IP, and the claim conditions say they need one', () => {
    const result = explainer.explain({
      method: 'GET',
      path: '/api/x',
      clientIp: '203.0.113.9',
      identity: { authenticated: false, reason: 'expired' },
    });
    expect(result.rule?.name).toBe('plain');
    expect(result.limits[0]?.clientKey).toBe('ip:203.0.113.9');
    expect(result.considered.find((c) => c.name === 'pro')?.reason).toBe(
      'claim plan needs a verified bearer token',
    );
    expect(result.considered.find((c) => c.name === 'members')?.reason).toBe('no verified bearer token');
  });

  it('shows a credential header only by its HMAC under CLIENT_KEY_SECRET', () => {
    const result = explainer.explain({
      method: 'GET',
      path: '/keys/x',
      headers: { 'X-Api-Key': 'sk_raw_1' },
    });
    expect(result.limits[0]?.clientKey).toBe(new SecretClientKeys('explain').clientKey('sk_raw_1'));
    expect(JSON.stringify(result)).not.toContain('sk_raw_1');
  });
});
