/** A rule compiled for the gateway: its limits by their plug-ins, its position, charge and refund. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_SLOT_LEASE_MS } from './compile-rule.js';
import { withDefaults } from './defaults.js';
import { compileRules } from './match.js';
import type { Rule, RuleInput } from './schema.js';

let nextId = 0;
function stored(input: RuleInput): Rule {
  nextId++;
  return {
    id: `00000000-0000-4000-8000-${String(nextId).padStart(12, '0')}`,
    ...withDefaults(input),
    version: 1,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  };
}

const limits: RuleInput['limits'] = [
  { name: 'burst', capacity: 20, refill: 10, period: '1s', maxDebt: 5 },
  { name: 'daily', algorithm: 'sliding-window', max: 1000, window: '1d' },
  { name: 'inflight', algorithm: 'concurrency', max: 4 },
];

describe('compileRule', () => {
  it('numbers the enabled rules by their place in the set', () => {
    const set = compileRules([
      stored({ name: 'a', match: { path: '/a' }, unlimited: true }),
      stored({ name: 'off', match: { path: '/off' }, unlimited: true, enabled: false }),
      stored({ name: 'b', match: { path: '/b' }, limit: { capacity: 1, refill: 1, period: '1s' } }),
    ]);
    expect(set.rules.map((rule) => [rule.name, rule.index])).toEqual([
      ['a', 0],
      ['b', 1],
    ]);
    expect(set.rules.every((rule, i) => set.rules[rule.index] === rule && rule.index === i)).toBe(true);
  });

  it('compiles a concurrency limit to one slot per request, whatever the rule costs, held 35 s by default', () => {
    const [compiled] = compileRules([stored({ name: 'c', match: { path: '/c' }, limits, cost: 3 })]).rules;
    expect(compiled!.limits[2]).toMatchObject({
      name: 'inflight',
      spec: { algorithm: 'concurrency', max: 4, leaseMs: DEFAULT_SLOT_LEASE_MS },
      cost: 1,
      policyItem: '"c.inflight";q=4;qu="concurrent-requests"',
    });
    expect(compiled!.limits.map((limit) => limit.cost)).toEqual([3, 3, 1]);
  });

  it("charges at most what the largest limit can ever take, unless charge.max says: capacity + maxDebt, a window's max", () => {
    const charge = { from: 'header', header: 'X-Cost' } as const;
    const ceiling = (input: Omit<RuleInput, 'name' | 'match'>) =>
      compileRules([stored({ name: 'r', match: { path: '/r' }, ...input })]).rules[0]!.charge;
    expect(ceiling({ limits, charge })).toEqual({
      from: 'header',
      header: 'x-cost',
      unitMs: 1,
      unitBytes: 1,
      max: 1000,
    });
    expect(ceiling({ limits: [limits[0]!, limits[2]!], charge })?.max).toBe(25);
    expect(ceiling({ limits, charge: { ...charge, max: 7 } })?.max).toBe(7);
    expect(ceiling({ limit: { capacity: 10, refill: 1, period: '1s' }, charge })?.max).toBe(20);
    expect(ceiling({ limits })).toBeUndefined();
  });

  it('spells out refund classes as status codes', () => {
    const [compiled] = compileRules([
      stored({ name: 'r', match: { path: '/r' }, limits, refund: { statuses: ['5xx', 429] } }),
    ]).rules;
    const codes = compiled!.refundStatuses!;
    expect(codes.size).toBe(101);
    expect([429, 500, 599].every((code) => codes.has(code))).toBe(true);
    expect(codes.has(499)).toBe(false);
  });
});
