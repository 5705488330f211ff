/**
 * Verified identity end to end (docs/rules.md, "Verified identity"): gateways built in-process with
 * real Redis, real key pairs (RS256 and EdDSA through a JWKS this test serves over HTTP, HS256 by
 * secret), and what a client sees — which rule applied (`RateLimit-Policy` names it) and which
 * bucket the request was charged to (`/usage` on the admin port).
 *
 * Rules: `ident` keys every request by its verified `sub`; `ident-pro` is the same with the condition
 * `match.claims: { plan: "pro" }`, so it applies only to a verified pro token. Every bad token claims
 * `plan: "pro"`: were it believed, `ident-pro` would apply. Each case sends from its own loopback
 * address, so its IP bucket is its own.
 */

import { randomUUID } from 'node:crypto';
import { StaticRules } from '@sluice/engine';
import { storedRule } from '@sluice/shared';
import { sleep, waitFor } from '@sluice/test-support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import {
  AUDIENCE,
  ISSUER,
  type JwksServer,
  type SigningKey,
  serveJwks,
  sign,
  signingKey,
  signWithSecret,
  unsignedToken,
} from './helpers/token-issuer.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const HS_SECRET = 'a-test-secret-of-at-least-32-bytes!!';
const CAPACITY = 1000;
/** RateLimit-Policy of the plain rule (1000 tokens, refilled at one an hour) */
const IDENT_POLICY = '"ident.who";q=1000;w=3600000';

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;

const perSub = (name: string) => ({
  name,
  client: { by: 'jwt' as const },
  capacity: CAPACITY,
  refill: 1,
  period: '1h',
});
const RULES = [
  rule({ name: 'ident', match: { path: '/id/**' }, limits: [perSub('who')] }),
  rule({ name: 'ident-pro', match: { path: '/id/**', claims: { plan: 'pro' } }, limits: [perSub('who')] }),
  rule({
    name: 'forge',
    match: { path: '/forge/**' },
    limits: [{ ...perSub('who'), capacity: 5 }],
  }),
  rule({ name: 'authed', match: { path: '/authed/**', authenticated: true }, unlimited: true }),
  rule({ name: 'anon', match: { path: '/authed/**', authenticated: false }, limits: [perSub('who')] }),
];

let upstream: Upstream;
let jwks: JwksServer;
let rsa: SigningKey;
let ed: SigningKey;
let stranger: SigningKey;
let gw: RunningGateway;
let hs: RunningGateway;

function env(name: string, extra: Record<string, string>) {
  return {
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: 'http://127.0.0.1:9',
    REDIS_URL,
    REDIS_KEY_PREFIX: uniqueKeyPrefix(name),
    STORE_FAILURE: 'closed',
    STORE_TIMEOUT_MS: '2000',
    CLIENT_KEY_SECRET: 'identity-test',
    ...extra,
  };
}

beforeAll(async () => {
  upstream = await startUpstream();
  [rsa, ed, stranger] = await Promise.all([
    signingKey('rsa-1', 'RS256'),
    signingKey('ed-1', 'EdDSA'),
    signingKey('rsa-1', 'RS256'),
  ]);
  jwks = await serveJwks([rsa, ed]);
  gw = await startGateway(
    env('identity', { JWT_JWKS_URL: jwks.url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE }),
    { rules: new StaticRules(RULES), heartbeatMs: 0, offendersFlushMs: 0 },
  );
  hs = await startGateway(env('identity-hs', { JWT_SECRET: HS_SECRET }), {
    rules: new StaticRules(RULES),
    heartbeatMs: 0,
    offendersFlushMs: 0,
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await hs?.close();
  await jwks?.close();
  await upstream?.close();
});

let nextAddress = 10;
/** A loopback address no other case uses: its IP bucket is its own. */
function freshAddress(): string {
  nextAddress++;
  return `127.0.${Math.floor(nextAddress / 250)}.${(nextAddress % 250) + 2}`;
}

async function send(on: RunningGateway, path: string, address: string, authorization?: string) {
  const response = await http(on.port, path, {
    localAddress: address,
    headers: authorization === undefined ? {} : { authorization },
  });
  return { status: response.status, policy: String(response.headers['ratelimit-policy'] ?? '') };
}

/** What `/usage` says remains of the rule's first limit for a client key. */
async function remaining(on: RunningGateway, ruleName: string, client: string): Promise<number> {
  const response = await fetch(`${on.adminUrl}/usage?rule=${ruleName}&client=${encodeURIComponent(client)}`);
  const body = (await response.json()) as { limits: { remaining: number }[] };
  return body.limits[0]!.remaining;
}

describe('a verified token keys the request by its claim', () => {
  it('RS256 through the JWKS: keyed jwt:<sub>, and its plan claim picks the rule', async () => {
    const token = await sign(rsa, { sub: 'alice', plan: 'pro' });
    const [a, b] = [freshAddress(), freshAddress()];
    // the same sub from two addresses shares one bucket
    expect(await send(gw, '/id/x', a, `Bearer ${token}`)).toEqual({
      status: 200,
      policy: expect.stringContaining('"ident-pro.who"'),
    });
    expect((await send(gw, '/id/x', b, `Bearer ${token}`)).status).toBe(200);
    expect(await remaining(gw, 'ident-pro', 'jwt:alice')).toBe(CAPACITY - 2);
    expect(await remaining(gw, 'ident-pro', `ip:${a}`)).toBe(CAPACITY);
  });

  it('EdDSA through the JWKS, a free plan: the plain rule', async () => {
    const token = await sign(ed, { sub: 'bob', plan: 'free' });
    const result = await send(gw, '/id/x', freshAddress(), `Bearer ${token}`);
    expect(result).toEqual({ status: 200, policy: IDENT_POLICY });
    expect(await remaining(gw, 'ident', 'jwt:bob')).toBe(CAPACITY - 1);
  });

  it('a numeric claim keys as its number, and `authenticated` tells tokens from none', async () => {
    const token = await sign(rsa, { sub: 42 as unknown as string });
    const address = freshAddress();
    expect((await send(gw, '/id/n', address, `Bearer ${token}`)).status).toBe(200);
    expect(await remaining(gw, 'ident', 'jwt:42')).toBe(CAPACITY - 1);
    expect((await send(gw, '/authed/x', address, `Bearer ${token}`)).policy).toBe('');
    expect((await send(gw, '/authed/x', address)).policy).toContain('"anon.who"');
  });
});

describe('a token that does not verify is keyed by IP and matches no claim', () => {
  const cases: Array<[string, () => Promise<string>]> = [
    [
      'expired (beyond the 30 s tolerance)',
      async () => `Bearer ${await sign(rsa, claims(), { expiresIn: -120 })}`,
    ],
    ['not yet valid', async () => `Bearer ${await sign(rsa, claims(), { notBeforeIn: 600 })}`],
    [
      'from another issuer',
      async () => `Bearer ${await sign(rsa, claims(), { issuer: 'https://evil.test' })}`,
    ],
    ['for another audience', async () => `Bearer ${await sign(ed, claims(), { audience: 'someone-else' })}`],
    ['alg none', async () => `Bearer ${unsignedToken(claims())}`],
    ['signed by another key under a known kid', async () => `Bearer ${await sign(stranger, claims())}`],
    [
      'signed by a key the JWKS does not list',
      async () => `Bearer ${await sign(stranger, claims(), { kid: 'unknown' })}`,
    ],
    [
      'HS256 with the public key as its secret (algorithm confusion)',
      async () =>
        `Bearer ${await signWithSecret(JSON.stringify(rsa.jwk), claims(), { issuer: ISSUER, audience: AUDIENCE })}`,
    ],
    ['a malformed token', async () => 'Bearer not.a.jwt'],
    ['a header that is not base64url JSON', async () => 'Bearer e30.e30.e30'],
    ['another scheme', async () => `Basic ${Buffer.from('alice:pro').toString('base64')}`],
  ];
  function claims() {
    return { sub: 'mallory', plan: 'pro' };
  }

  it.each(cases)('%s', async (_name, authorization) => {
    const address = freshAddress();
    const result = await send(gw, '/id/bad', address, await authorization());
    expect(result).toEqual({ status: 200, policy: IDENT_POLICY });
    expect(await remaining(gw, 'ident', `ip:${address}`)).toBe(CAPACITY - 1);
    expect(await remaining(gw, 'ident', 'jwt:mallory')).toBe(CAPACITY);
    expect(await remaining(gw, 'ident-pro', 'jwt:mallory')).toBe(CAPACITY);
  });

  it('counts each failure by its reason in sluice_jwt_verifications_total', async () => {
    const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    for (const reason of [
      'expired',
      'not_yet_valid',
      'wrong_issuer',
      'wrong_audience',
      'bad_signature',
      'unknown_key',
      'malformed',
    ]) {
      expect(metricValue(text, 'sluice_jwt_verifications_total', { result: reason }), reason).toBeGreaterThan(
        0,
      );
    }
  });
});

describe('abuse', () => {
  it('rotating forged tokens from one IP never gets more than its IP budget', async () => {
    const address = freshAddress();
    const statuses: number[] = [];
    for (let i = 0; i < 15; i++) {
      const token = await sign(stranger, { sub: `forged-${randomUUID()}`, plan: 'pro' });
      statuses.push((await send(gw, '/forge/x', address, `Bearer ${token}`)).status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.slice(5).every((s) => s === 429)).toBe(true);
  });

  it('claim values that look like prototype keys are plain client keys', async () => {
    for (const sub of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      const token = await sign(rsa, { sub, plan: 'constructor' });
      expect((await send(gw, '/id/proto', freshAddress(), `Bearer ${token}`)).status).toBe(200);
      expect(await remaining(gw, 'ident', `jwt:${sub}`)).toBe(CAPACITY - 1);
    }
  });
});

describe('HS256 by JWT_SECRET', () => {
  it('verifies tokens signed with the secret, refuses others', async () => {
    const good = await signWithSecret(HS_SECRET, { sub: 'carol', plan: 'pro' });
    expect((await send(hs, '/id/hs', freshAddress(), `Bearer ${good}`)).policy).toContain('"ident-pro.who"');
    expect(await remaining(hs, 'ident-pro', 'jwt:carol')).toBe(CAPACITY - 1);
    for (const bad of [
      await signWithSecret('another-secret-of-at-least-32-bytes!', { sub: 'carol', plan: 'pro' }),
      await sign(rsa, { sub: 'carol', plan: 'pro' }),
    ]) {
      const address = freshAddress();
      expect((await send(hs, '/id/hs', address, `Bearer ${bad}`)).policy).toContain('"ident.who"');
      expect(await remaining(hs, 'ident', `ip:${address}`)).toBe(CAPACITY - 1);
    }
  });
});

describe('a gateway without JWT_*', () => {
  it('treats every request as unauthenticated and warns once per rule set', async () => {
    const warnings: string[] = [];
    const warn = (first: unknown, second?: unknown) =>
      warnings.push(typeof first === 'string' ? first : String(second ?? ''));
    const quiet = () => {};
    const logger = {
      level: 'info',
      fatal: quiet,
      error: quiet,
      warn,
      info: quiet,
      debug: quiet,
      trace: quiet,
      silent: quiet,
      child: () => logger,
    };
    const rules = new StaticRules(RULES);
    const gateway = await startGateway(env('identity-none', {}), {
      rules,
      heartbeatMs: 0,
      offendersFlushMs: 0,
      logger: logger as unknown as NonNullable<Parameters<typeof startGateway>[1]>['logger'],
    });
    try {
      const identityWarnings = () =>
        warnings.filter((w) => w.includes('neither JWT_JWKS_URL nor JWT_SECRET'));
      expect(identityWarnings()).toHaveLength(1);
      const token = await signWithSecret(HS_SECRET, { sub: 'gina', plan: 'pro' });
      const address = freshAddress();
      expect((await send(gateway, '/id/none', address, `Bearer ${token}`)).policy).toBe(IDENT_POLICY);
      expect(await remaining(gateway, 'ident', `ip:${address}`)).toBe(CAPACITY - 1);
      rules.set(RULES);
      expect(identityWarnings()).toHaveLength(2);
    } finally {
      await gateway.close();
    }
  });
});

describe('the JWKS changes and fails', () => {
  it('picks up a new kid, and refuses an old one once it leaves the set', async () => {
    const rotated = await serveJwks([rsa]);
    const next = await signingKey('rsa-2', 'RS256');
    const gateway = await startGateway(
      env('identity-rotation', { JWT_JWKS_URL: rotated.url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE }),
      {
        rules: new StaticRules(RULES),
        heartbeatMs: 0,
        offendersFlushMs: 0,
        jwksCooldownMs: 200,
        jwksMaxAgeMs: 500,
      },
    );
    try {
      const old = await sign(rsa, { sub: 'dave', plan: 'pro' });
      expect((await send(gateway, '/id/r', freshAddress(), `Bearer ${old}`)).policy).toContain('ident-pro');
      rotated.keys = [rsa, next];
      await sleep(250); // past the cool-down
      const fresh = await sign(next, { sub: 'erin', plan: 'pro' });
      expect((await send(gateway, '/id/r', freshAddress(), `Bearer ${fresh}`)).policy).toContain('ident-pro');
      rotated.keys = [next];
      // once the set is fetched again (its max age), the old key's tokens, cached ones included, stop verifying
      await waitFor(
        async () =>
          (await send(gateway, '/id/r', freshAddress(), `Bearer ${old}`)).policy.includes('"ident.who"'),
        10_000,
        'the old key refused',
      );
      expect((await send(gateway, '/id/r', freshAddress(), `Bearer ${fresh}`)).policy).toContain('ident-pro');
    } finally {
      await gateway.close();
      await rotated.close();
    }
  });

  it('an outage never blocks a request: unauthenticated, counted, and verified once the JWKS is back', async () => {
    const down = await serveJwks([rsa]);
    down.up = false;
    const gateway = await startGateway(
      env('identity-outage', { JWT_JWKS_URL: down.url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE }),
      { rules: new StaticRules(RULES), heartbeatMs: 0, offendersFlushMs: 0, jwksCooldownMs: 300 },
    );
    try {
      const token = await sign(rsa, { sub: 'frank', plan: 'pro' });
      const address = freshAddress();
      const during = await send(gateway, '/id/o', address, `Bearer ${token}`);
      expect(during).toEqual({ status: 200, policy: IDENT_POLICY });
      expect(await remaining(gateway, 'ident', `ip:${address}`)).toBe(CAPACITY - 1);
      const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text();
      expect(metricValue(text, 'sluice_jwks_fetches_total', { result: 'error' })).toBeGreaterThan(0);
      expect(
        metricValue(text, 'sluice_jwt_verifications_total', { result: 'jwks_unavailable' }),
      ).toBeGreaterThan(0);
      down.up = true;
      await waitFor(
        async () =>
          (await send(gateway, '/id/o', freshAddress(), `Bearer ${token}`)).policy.includes('ident-pro'),
        10_000,
        'verified once the JWKS is back',
      );
    } finally {
      await gateway.close();
      await down.close();
    }
  });
});
