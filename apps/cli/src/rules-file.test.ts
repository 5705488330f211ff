import type { Rule } from '@sluice/shared';
import { describe, expect, it } from 'vitest';
import { changedFields } from './plan.js';
import { formatRulesFile, parseRulesFile, RulesFileError } from './rules-file.js';

function problemsOf(text: string, format: 'yaml' | 'json' = 'yaml') {
  try {
    parseRulesFile(text, format, 'rules.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(RulesFileError);
    return (err as RulesFileError).problems;
  }
  throw new Error('expected the file to be rejected');
}

describe('parseRulesFile', () => {
  it('reads YAML and JSON into rule inputs', () => {
    const yaml = `rules:
  - name: per-ip
    match: { path: /api/** }
    limit: { capacity: 5, refill: 5, period: 1m }
    shadow: true
`;
    const rules = parseRulesFile(yaml, 'yaml');
    expect(rules).toEqual([
      {
        name: 'per-ip',
        match: { path: '/api/**' },
        limit: { capacity: 5, refill: 5, period: '1m' },
        shadow: true,
      },
    ]);
    expect(parseRulesFile(JSON.stringify({ rules }), 'json')).toEqual(rules);
  });

  it('reports every bad entry with its index, name and field', () => {
    const problems = problemsOf(`rules:
  - name: ok
    match: { path: /a }
    limit: { capacity: 1, refill: 1, period: 1s }
  - name: bad-period
    match: { path: /b }
    limit: { capacity: 1, refill: 1, period: soon }
  - name: Bad Name
    match: { path: /c/**/d }
    limit: { capacity: 1, refill: 1, period: 1s }
    colour: blue
  - name: ok
    match: { path: /a }
    limit: { capacity: 1, refill: 1, period: 1s }
`);
    const wheres = problems.map((p) => p.where);
    expect(wheres).toContain('rules[1] (bad-period).limit.period');
    expect(problems.find((p) => p.where === 'rules[1] (bad-period).limit.period')?.message).toBe(
      '"soon" is not a duration like "500ms", "1s", "1m", "1h" or "1d"',
    );
    expect(wheres).toContain('rules[2] (Bad Name).name');
    expect(wheres).toContain('rules[2] (Bad Name).colour');
    expect(wheres).toContain('rules[3] (ok).name');
    expect(problems.find((p) => p.where === 'rules[3] (ok).name')?.message).toMatch(/duplicates rules\[0\]/);
  });

  it('names a header rule without a header name and a misplaced **', () => {
    const problems = problemsOf(`rules:
  - name: keyed
    match: { path: /x/**/y }
    client: { by: header }
    limit: { capacity: 1, refill: 1, period: 1s }
`);
    expect(problems.map((p) => p.where).sort()).toEqual([
      'rules[0] (keyed).client.name',
      'rules[0] (keyed).match.path',
    ]);
  });

  it('rejects a file without a rules list, unknown top-level keys and broken syntax', () => {
    expect(problemsOf('rule: []')).toEqual([
      { where: 'rule', message: expect.stringMatching(/not a known field/) },
      { where: 'rules', message: 'must be a list of rules' },
    ]);
    expect(problemsOf('- just a list')[0]?.where).toBe('(top level)');
    expect(problemsOf('rules: [ {name: a')[0]?.where).toBe('(yaml)');
    expect(problemsOf('{"rules": [}', 'json')[0]?.where).toBe('(json)');
    expect(problemsOf('rules:\n  - name: a\n    name: b\n')[0]?.where).toBe('(yaml)');
  });
});

describe('formatRulesFile', () => {
  const rule: Rule = {
    id: '00000000-0000-4000-8000-000000000001',
    name: 'keyed',
    description: 'per key',
    match: { path: '/orders/**', methods: ['GET'] },
    client: { by: 'header', name: 'x-api-key' },
    limit: { capacity: 10, refill: 1, period: '1s' },
    cost: 8,
    maxDebt: 10,
    enabled: true,
    shadow: false,
    priority: 0,
    version: 7,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  };

  it('writes writable fields only, sorted by name, defaults left out, and reads back equal', () => {
    const other: Rule = { ...rule, name: 'a-first', client: { by: 'ip' }, cost: 1, maxDebt: 3, priority: 2 };
    const yaml = formatRulesFile([rule, other], 'yaml');
    expect(yaml).not.toMatch(/version|createdAt|updatedAt|id:|enabled|shadow/);
    const parsed = parseRulesFile(yaml, 'yaml');
    expect(parsed.map((r) => r.name)).toEqual(['a-first', 'keyed']);
    expect(parsed[1]).toEqual({
      name: 'keyed',
      description: 'per key',
      match: { path: '/orders/**', methods: ['GET'] },
      client: { by: 'header', name: 'x-api-key' },
      limit: { capacity: 10, refill: 1, period: '1s' },
      cost: 8,
    });
    expect(parsed[0]).toMatchObject({ maxDebt: 3, priority: 2 });
    expect(changedFields(parsed[1]!, rule)).toEqual([]);
    expect(changedFields(parsed[0]!, other)).toEqual([]);
    expect(parseRulesFile(formatRulesFile([rule, other], 'json'), 'json')).toEqual(parsed);
  });
});
