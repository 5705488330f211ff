import { describe, expect, it } from 'vitest';
import {
  envBoolean,
  envCustom,
  envInteger,
  envOneOf,
  envText,
  envUrl,
  got,
  LOG_LEVEL_VAR,
} from './env-vars.js';
import { ConfigError, readEnv } from './read-env.js';

const SPEC = {
  PORT: envInteger({ description: 'listen port', default: 8080, min: 0, max: 65535 }),
  VERBOSE: envBoolean({ description: 'talk more', default: false }),
  MODE: envOneOf({ description: 'what to do', values: ['fast', 'safe'], default: 'safe' }),
  NAME: envText({
    description: 'a name',
    default: 'sluice',
    pattern: /^[a-z]+$/,
    mustBe: 'lower-case letters',
  }),
  TOKEN: envText({ description: 'a secret', secret: true, pattern: /^\S+$/, mustBe: 'one word' }),
  TARGET: envUrl({
    description: 'where to go',
    protocols: ['http:', 'https:'],
    example: 'http://x:1',
    required: true,
  }),
  CACHE_URL: envUrl({
    description: 'the cache',
    protocols: ['redis:'],
    example: 'redis://host:6379',
    secret: true,
  }),
  LEVEL: LOG_LEVEL_VAR,
  SIZES: envCustom({
    description: 'sizes',
    accepts: 'comma-separated integers',
    default: [1] as number[],
    parse: (raw) =>
      /^\d+(,\d+)*$/.test(raw)
        ? { value: raw.split(',').map(Number) }
        : { problem: `must be comma-separated integers ${got(raw)}` },
  }),
};

function problemsOf(env: Record<string, string>): string[] {
  try {
    readEnv(SPEC, env).values();
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe('readEnv', () => {
  it('fills defaults, and unset optional variables are undefined', () => {
    expect(readEnv(SPEC, { TARGET: 'http://x:1' }).values()).toEqual({
      PORT: 8080,
      VERBOSE: false,
      MODE: 'safe',
      NAME: 'sluice',
      TOKEN: undefined,
      TARGET: 'http://x:1',
      CACHE_URL: undefined,
      LEVEL: 'info',
      SIZES: [1],
    });
  });

  it('reads and trims every kind of value', () => {
    expect(
      readEnv(SPEC, {
        PORT: ' 0 ',
        VERBOSE: 'TRUE',
        MODE: 'fast',
        NAME: 'edge',
        TOKEN: 's3cr3t',
        TARGET: 'https://y',
        CACHE_URL: 'redis://:pw@c:6379',
        LEVEL: 'debug',
        SIZES: '2,3',
      }).values(),
    ).toEqual({
      PORT: 0,
      VERBOSE: true,
      MODE: 'fast',
      NAME: 'edge',
      TOKEN: 's3cr3t',
      TARGET: 'https://y',
      CACHE_URL: 'redis://:pw@c:6379',
      LEVEL: 'debug',
      SIZES: [2, 3],
    });
    expect(readEnv(SPEC, { TARGET: 'http://x', VERBOSE: '1' }).values().VERBOSE).toBe(true);
    expect(readEnv(SPEC, { TARGET: 'http://x', VERBOSE: '0' }).values().VERBOSE).toBe(false);
  });

  it('counts empty and blank values as unset', () => {
    const values = readEnv(SPEC, { TARGET: 'http://x:1', PORT: '', MODE: '  ', CACHE_URL: '' }).values();
    expect(values).toMatchObject({ PORT: 8080, MODE: 'safe', CACHE_URL: undefined });
    expect(problemsOf({ TARGET: '' })).toEqual(['TARGET: is required (e.g. http://x:1)']);
  });

  it('lists every problem, one line per variable, in declaration order, in one style', () => {
    expect(
      problemsOf({
        SIZES: '1,,2',
        LEVEL: 'loud',
        NAME: 'Sluice',
        MODE: 'slow',
        VERBOSE: 'yes',
        PORT: '65536',
        TARGET: 'x',
      }),
    ).toEqual([
      'PORT: must be an integer from 0 to 65535 (got "65536")',
      'VERBOSE: must be true or false (got "yes")',
      'MODE: must be one of fast, safe (got "slow")',
      'NAME: must be lower-case letters (got "Sluice")',
      'TARGET: must be a URL like http://x:1 (got "x")',
      'LEVEL: must be one of fatal, error, warn, info, debug, trace, silent (got "loud")',
      'SIZES: must be comma-separated integers (got "1,,2")',
    ]);
  });

  it.each(['-1', '1.5', '1e3', '0x10', '８０', '99999999999999999999'])('refuses the integer %s', (raw) => {
    expect(problemsOf({ TARGET: 'http://x', PORT: raw })).toEqual([
      `PORT: must be an integer from 0 to 65535 ${got(raw)}`,
    ]);
  });

  it('never echoes a secret, and shows at most the scheme of a secret URL', () => {
    const problems = problemsOf({
      TARGET: 'ftp://x',
      TOKEN: 'two words',
      CACHE_URL: 'http://:hunter2@cache',
    });
    expect(problems).toEqual([
      'TOKEN: must be one word',
      'TARGET: must start with http:// or https:// (got "ftp://x")',
      'CACHE_URL: must start with redis:// (got scheme "http:")',
    ]);
    expect(problemsOf({ TARGET: 'http://x', CACHE_URL: 'not a url hunter2' })).toEqual([
      'CACHE_URL: must be a URL like redis://host:6379',
    ]);
  });

  it('cuts a long value short in a problem', () => {
    const [problem] = problemsOf({ TARGET: 'http://x', MODE: 'x'.repeat(500) });
    expect(problem).toBe(`MODE: must be one of fast, safe (got "${'x'.repeat(80)}…")`);
  });

  it('takes problems across variables, keeping one line per variable', () => {
    const reading = readEnv(SPEC, { TARGET: 'http://x', PORT: 'x', MODE: 'fast' });
    expect(reading.get('PORT')).toBeUndefined();
    expect(reading.get('MODE')).toBe('fast');
    expect(reading.get('VERBOSE')).toBe(false);
    expect(reading.ok('MODE', 'VERBOSE')).toBe(true);
    expect(reading.ok('MODE', 'PORT')).toBe(false);
    expect(reading.isSet('MODE')).toBe(true);
    expect(reading.isSet('VERBOSE')).toBe(false);
    reading.report('PORT', 'second problem');
    reading.report('MODE', 'must not be fast on Sundays');
    expect(reading.problems()).toEqual([
      'PORT: must be an integer from 0 to 65535 (got "x")',
      'MODE: must not be fast on Sundays',
    ]);
    expect(() => reading.values()).toThrow(ConfigError);
  });

  it('throws a ConfigError with code SLUICE_CONFIG_INVALID whose message lists the problems', () => {
    let thrown: unknown;
    try {
      readEnv(SPEC, {}).values();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    const error = thrown as ConfigError;
    expect(error.code).toBe('SLUICE_CONFIG_INVALID');
    expect(error.message).toBe('invalid configuration:\nTARGET: is required (e.g. http://x:1)');
  });

  it('describes each variable for the docs', () => {
    expect(SPEC.PORT).toMatchObject({ accepts: 'integer 0–65535', defaultText: '8080', required: false });
    expect(SPEC.TARGET).toMatchObject({ defaultText: 'required', required: true });
    expect(SPEC.CACHE_URL).toMatchObject({ defaultText: 'unset', accepts: 'URL starting with redis://' });
    expect(SPEC.MODE.accepts).toBe('one of fast, safe');
    expect(SPEC.NAME.accepts).toBe('lower-case letters');
  });
});
