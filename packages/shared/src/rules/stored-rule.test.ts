import { describe, expect, it } from 'vitest';
import { RuleInputError, storedRule } from './stored-rule.js';

describe('storedRule', () => {
  it('gives a checked input its defaults, a fresh id and version 1', () => {
    const a = storedRule({
      name: 'a',
      match: { path: '/a/**' },
      limit: { capacity: 5, refill: 1, period: '1s' },
    });
    const b = storedRule({ name: 'b', match: { path: '/b/**' }, unlimited: true });
    expect(a).toMatchObject({ name: 'a', version: 1, enabled: true });
    expect(a.id).not.toBe(b.id);
  });

  it('refuses what the rules API would refuse, naming the field', () => {
    const bad = () =>
      storedRule({
        name: 'both',
        match: { path: '/x/**' },
        unlimited: true,
        limit: { capacity: 5, refill: 1, period: '1s' },
      });
    expect(bad).toThrow(RuleInputError);
    expect(bad).toThrow(/unlimited must not be set together with limit/);
  });
});
