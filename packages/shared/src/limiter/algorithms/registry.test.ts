/**
 * What an algorithm plug-in must provide, and proof that everything the rest of Sluice knows about an
 * algorithm comes from its plug-in: the registry lists each one, and the shared functions (headers,
 * peek and usage, carry-forward, lease, rule schema, defaults, checks, compile, summary) ask the
 * plug-in instead of switching on its name. A new algorithm fails here until its folder provides
 * everything and this file has an example limit of it.
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { checkRule } from '../../rules/check.js';
import { withDefaults } from '../../rules/defaults.js';
import { compileRules } from '../../rules/match.js';
import type { Rule, RuleInput } from '../../rules/schema.js';
import { limitSummary } from '../../rules/summary.js';
import { isRule, validateRuleInput } from '../../rules/validate.js';
import { policyItem, remainingOf } from '../headers.js';
import type { LimitCheck, LimitOutcome } from '../limits.js';
import { parseStoredState, peekOutcomes, redisStateCommand, usageOf } from '../peek.js';
import { carryForward } from './carry-forward.js';
import {
  ALGORITHM_LUA_FILES,
  ALGORITHM_NAMES,
  ALGORITHMS,
  type AlgorithmName,
  algorithmOf,
} from './index.js';
import { leaseRequestsOf, leaseSpecOf } from './lease.js';

/** Every member a plug-in provides, and what it is. */
const MEMBERS = {
  name: 'string',
  luaFile: 'string',
  assertArguments: 'function',
  luaArguments: 'function',
  evaluate: 'function',
  settle: 'function',
  keyName: 'function',
  redisState: 'object',
  remaining: 'function',
  moreQuotaMs: 'function',
  policyParameters: 'function',
  idleLevel: 'function',
  carryForward: 'function',
  usage: 'function',
  leaseRequests: 'function',
  leaseSpec: 'function',
  leaseWaitMs: 'function',
  fairShare: 'function',
  chargeCeiling: 'function',
  defaultRefundMax: 'function',
  rule: 'object',
} as const;
const REDIS_STATE = { command: 'function', parse: 'function' } as const;
const RULE_FORMAT = {
  label: 'string',
  fields: 'object',
  required: 'object',
  storedSchema: 'object',
  withDefaults: 'function',
  check: 'function',
  compile: 'function',
  describe: 'function',
} as const;

/** One limit of each algorithm as a rule writes it, and what Sluice makes of it. */
const EXAMPLES: Record<
  AlgorithmName,
  { written: Record<string, unknown>; summary: string; policy: string; keyName: string }
> = {
  'token-bucket': {
    written: {
      name: 'burst',
      client: { by: 'header', name: 'X-Api-Key' },
      capacity: 5,
      refill: 1,
      period: '1s',
    },
    summary: 'burst: 5 per x-api-key, 1 more every 1s (token bucket)',
    policy: '"r.burst";q=5;w=5',
    keyName: 'burst',
  },
  'sliding-window': {
    written: { name: 'daily', algorithm: 'sliding-window', max: 100, window: '1d' },
    summary: 'daily: 100 per client IP in any 1d (sliding window)',
    policy: '"r.daily";q=100;w=86400',
    keyName: 'daily',
  },
  concurrency: {
    written: { name: 'inflight', client: { by: 'global' }, algorithm: 'concurrency', max: 3 },
    summary: 'inflight: 3 at once for all clients together',
    policy: '"r.inflight";q=3;qu="concurrent-requests"',
    keyName: 'inflight:slots',
  },
};

function ruleWith(written: Record<string, unknown>): RuleInput {
  return { name: 'r', match: { path: '/r' }, limits: [written as never] };
}

function stored(input: RuleInput): Rule {
  return {
    id: '00000000-0000-4000-8000-000000000001',
    ...withDefaults(input),
    version: 1,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('the algorithm registry', () => {
  it('lists each plug-in under its own name, with every member a plug-in must provide', () => {
    expect(ALGORITHM_NAMES).toEqual(Object.keys(ALGORITHMS));
    for (const name of ALGORITHM_NAMES) {
      const algorithm = ALGORITHMS[name];
      expect(algorithm.name, name).toBe(name);
      for (const [member, kind] of Object.entries(MEMBERS)) {
        expect(typeof algorithm[member as keyof typeof algorithm], `${name}.${member}`).toBe(kind);
      }
      for (const [member, kind] of Object.entries(REDIS_STATE)) {
        expect(
          typeof algorithm.redisState[member as keyof typeof REDIS_STATE],
          `${name}.redisState.${member}`,
        ).toBe(kind);
      }
      for (const [member, kind] of Object.entries(RULE_FORMAT)) {
        expect(typeof algorithm.rule[member as keyof typeof RULE_FORMAT], `${name}.rule.${member}`).toBe(
          kind,
        );
      }
      const fields = Object.keys(algorithm.rule.fields);
      expect(fields.length, `${name} writes at least one field of its own`).toBeGreaterThan(0);
      for (const field of algorithm.rule.required) expect(fields, `${name}.rule.required`).toContain(field);
      const storedAlgorithm = (
        algorithm.rule.storedSchema as { properties: { algorithm: { const: string } } }
      ).properties.algorithm.const;
      expect(storedAlgorithm, `${name}'s stored schema names it`).toBe(name);
      expect(EXAMPLES[name], `an example limit of ${name} in this test`).toBeDefined();
    }
  });

  it("splices each plug-in's own Lua snippet into the script, registered under its name", () => {
    expect(ALGORITHM_LUA_FILES).toEqual(ALGORITHM_NAMES.map((name) => ALGORITHMS[name].luaFile));
    for (const name of ALGORITHM_NAMES) {
      const lua = readFileSync(new URL(ALGORITHMS[name].luaFile, import.meta.url), 'utf8');
      expect(ALGORITHMS[name].luaFile.startsWith(`${name}/`)).toBe(true);
      expect(lua).toContain(`ALGORITHMS['${name}'] = `);
    }
  });
});

describe.each(ALGORITHM_NAMES)('the %s plug-in is what Sluice asks', (name) => {
  const algorithm = ALGORITHMS[name];
  const example = EXAMPLES[name];
  const input = ruleWith(example.written);

  it('sends its snippet as many numbers as the snippet reads, and an id exactly when it holds slots', () => {
    const lua = readFileSync(new URL(algorithm.luaFile, import.meta.url), 'utf8');
    const spec = compileRules([stored(input)]).rules[0]!.limits[0]!.spec;
    const arity = /^\s*arity = (\d+),/m.exec(lua);
    expect(arity, `${name}'s snippet declares its arity`).not.toBeNull();
    expect(algorithmOf(spec).luaArguments(spec as never)).toHaveLength(Number(arity![1]));
    // the store sends a lease id after the values of a check whose algorithm holds slots (slotIds),
    // and the script reads one for a snippet that takesId: the two must agree
    expect(/^\s*takesId = true,/m.test(lua)).toBe(algorithm.slots !== undefined);
  });

  it('validates, fills in, checks, compiles and summarises its limits', () => {
    const spies = ['withDefaults', 'check', 'compile', 'describe'].map((method) =>
      vi.spyOn(algorithm.rule, method as 'check'),
    );
    expect(validateRuleInput(input)).toEqual({ ok: true, value: input });
    const rule = stored(input);
    expect(isRule(rule)).toBe(true);
    expect(checkRule(rule)).toEqual([]);
    const [limit] = 'limits' in rule ? rule.limits : [];
    expect(limitSummary(limit!)).toBe(example.summary);
    const compiled = compileRules([rule]).rules[0]!;
    expect(compiled.limits[0]!.spec.algorithm).toBe(name);
    expect(compiled.policyHeader).toBe(example.policy);
    for (const spy of spies) expect(spy).toHaveBeenCalled();
  });

  it('says its own key, header numbers, usage, carry-forward and lease', () => {
    const spec = compileRules([stored(input)]).rules[0]!.limits[0]!.spec;
    const spies = [
      'keyName',
      'remaining',
      'policyParameters',
      'usage',
      'carryForward',
      'leaseRequests',
      'leaseSpec',
      'evaluate',
    ].map((method) => vi.spyOn(algorithm, method as 'remaining'));
    const parse = vi.spyOn(algorithm.redisState, 'parse');
    const command = vi.spyOn(algorithm.redisState, 'command');

    expect(algorithmOf(spec).keyName(example.written.name as string)).toBe(example.keyName);
    expect(policyItem('"a"', spec)).toBe(example.policy.replace(/^"[^"]*"/, '"a"'));
    const check: LimitCheck = { key: 'k', spec, cost: 1 };
    const [outcome] = peekOutcomes([check], [undefined], 1_000) as [LimitOutcome];
    expect(outcome.remaining).toBe(remainingOf(spec, outcome.level));
    expect(usageOf(spec, outcome)).toMatchObject({ remaining: outcome.remaining, debt: 0, inFlight: 0 });
    expect(carryForward(outcome, spec, 0)).toEqual(outcome);
    expect(leaseRequestsOf([{ spec, cost: 1 }])).toBeGreaterThanOrEqual(0);
    expect(leaseSpecOf(spec).algorithm).toBe(name);
    expect(redisStateCommand(spec, 'k')).toContain('k');
    expect(parseStoredState(spec, null)).toBeUndefined();
    for (const spy of [...spies, parse, command]) expect(spy).toHaveBeenCalled();
  });

  it('reports an idle limit as its whole quota', () => {
    const spec = compileRules([stored(input)]).rules[0]!.limits[0]!.spec;
    const [outcome] = peekOutcomes([{ key: 'k', spec, cost: 1 }], [undefined], 1_000) as [LimitOutcome];
    expect(outcome).toMatchObject({ allowed: true, retryAfterMs: 0, resetMs: 0 });
    expect(outcome.level).toBe(algorithm.idleLevel(spec as never));
  });
});
