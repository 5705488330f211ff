/** The JWT_* and CLIENT_KEY_SECRET variables: what each process accepts, and one clear line per bad value. */
import { describe, expect, it } from 'vitest';
import { ConfigError, readEnv } from '../config/read-env.js';
import { IDENTITY_ENV, identityConfig } from './identity-env.js';

function load(env: Record<string, string>) {
  const reading = readEnv(IDENTITY_ENV, env);
  const identity = identityConfig(reading);
  reading.values(); // throws ConfigError with every problem
  return identity;
}

function problems(env: Record<string, string>): string[] {
  try {
    load(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

const SECRET = 'x'.repeat(32);

describe('identity variables', () => {
  it('is off without JWT_JWKS_URL or JWT_SECRET', () => {
    expect(load({})).toEqual({ jwt: undefined, clientKeySecret: undefined });
  });

  it('defaults the algorithms by key source, and the clock tolerance to 30 s', () => {
    expect(load({ JWT_SECRET: SECRET }).jwt).toMatchObject({ algorithms: ['HS256'], clockToleranceS: 30 });
    expect(load({ JWT_JWKS_URL: 'https://auth.example.com/jwks.json' }).jwt).toMatchObject({
      algorithms: ['RS256', 'ES256', 'EdDSA'],
      jwksUrl: 'https://auth.example.com/jwks.json',
      secret: undefined,
    });
  });

  it.each([
    [{ JWT_SECRET: 'short' }, 'JWT_SECRET: must be at least 32 bytes'],
    [{ JWT_SECRET: SECRET, JWT_JWKS_URL: 'https://a.example/jwks' }, 'JWT_SECRET: must not be set together'],
    [{ JWT_JWKS_URL: 'ftp://a.example/jwks' }, 'JWT_JWKS_URL: must start with http:// or https://'],
    [{ JWT_JWKS_URL: 'https://a.example/jwks', JWT_ALGORITHMS: 'RS256,none' }, 'JWT_ALGORITHMS: must list'],
    [
      { JWT_JWKS_URL: 'https://a.example/jwks', JWT_ALGORITHMS: 'HS256' },
      'JWT_ALGORITHMS: with JWT_JWKS_URL',
    ],
    [{ JWT_SECRET: SECRET, JWT_ALGORITHMS: 'RS256' }, 'JWT_ALGORITHMS: with JWT_SECRET'],
    [{ JWT_SECRET: SECRET, JWT_CLOCK_TOLERANCE_S: '-1' }, 'JWT_CLOCK_TOLERANCE_S:'],
  ])('refuses %j with one clear line', (env, line) => {
    const found = problems(env);
    expect(found).toHaveLength(1);
    expect(found[0]).toContain(line);
    // a secret is never echoed
    expect(found[0]).not.toContain(SECRET);
    expect(found[0]).not.toContain('short"');
  });
});
