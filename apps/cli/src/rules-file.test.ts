import { type Rule, type RuleInput, withDefaults } from '@sluice/shared';
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

  /** What the API returns for `input`. */
  const asStored = (input: RuleInput, n: number): Rule => ({
    id: `00000000-0000-4000-8000-00000000000${n}`,
    ...withDefaults(input),
    version: 1,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  });
  const stacked: RuleInput = {
    name: 'orders',
    description: 'burst and daily per key, a cap for everyone',
    match: {
      path: '/orders/**',
      methods: ['GET', 'POST'],
      headers: { 'X-Tier': 'free' },
      clientIps: ['203.0.113.0/24', '2001:db8::/32'],
      notClientIps: ['203.0.113.9'],
      caseInsensitive: true,
    },
    limits: [
      { name: 'burst', client: { by: 'header', name: 'X-Api-Key' }, capacity: 5, refill: 1, period: '1s' },
      {
        name: 'daily',
        client: { by: 'header', name: 'x-api-key' },
        algorithm: 'sliding-window',
        max: 1000,
        window: '1d',
        cost: 2,
      },
      { name: 'everyone', client: { by: 'global' }, capacity: 100, refill: 100, period: 1000, maxDebt: 0 },
    ],
    cost: 3,
    priority: 5,
  };
  const partner: RuleInput = {
    name: 'orders-partner',
    match: { path: '/orders/**', headers: { 'x-partner': 'acme' } },
    unlimited: true,
    priority: 10,
  };

  it('writes stacked rules and exemptions as a person writes them, and reads them back equal', () => {
    const rules = [asStored(stacked, 1), asStored(partner, 2)];
    const yaml = formatRulesFile(rules, 'yaml');
    // defaults left out: no algorithm token-bucket, no maxDebt equal to capacity, no client by ip
    expect(yaml).not.toMatch(/token-bucket|maxDebt: 5|by: ip|enabled|shadow|version|id:/);
    // one line per limit, as in docs/rules.md
    expect(yaml).toContain(
      '      - { name: burst, client: { by: header, name: x-api-key }, capacity: 5, refill: 1, period: 1s }',
    );
    expect(yaml).toContain(
      '    match: { path: /orders/**, headers: { x-partner: acme } }\n    unlimited: true\n    priority: 10',
    );
    const parsed = parseRulesFile(yaml, 'yaml');
    expect(parsed).toEqual([
      {
        name: 'orders',
        description: 'burst and daily per key, a cap for everyone',
        match: {
          path: '/orders/**',
          methods: ['GET', 'POST'],
          headers: { 'x-tier': 'free' },
          clientIps: ['203.0.113.0/24', '2001:db8::/32'],
          notClientIps: ['203.0.113.9'],
          caseInsensitive: true,
        },
        limits: [
          {
            name: 'burst',
            client: { by: 'header', name: 'x-api-key' },
            capacity: 5,
            refill: 1,
            period: '1s',
          },
          {
            name: 'daily',
            client: { by: 'header', name: 'x-api-key' },
            algorithm: 'sliding-window',
            max: 1000,
            window: '1d',
            cost: 2,
          },
          {
            name: 'everyone',
            client: { by: 'global' },
            capacity: 100,
            refill: 100,
            period: 1000,
            maxDebt: 0,
          },
        ],
        cost: 3,
        priority: 5,
      },
      partner,
    ]);
    expect(changedFields(parsed[0]!, rules[0]!)).toEqual([]);
    expect(changedFields(parsed[1]!, rules[1]!)).toEqual([]);
    expect(parseRulesFile(formatRulesFile(rules, 'json'), 'json')).toEqual(parsed);
  });

  it('exports verified-identity rules (claims, authenticated, jwt and secret clients) and reads them back equal', () => {
    const tiered: RuleInput = {
      name: 'tiered',
      match: { path: '/api/**', claims: { plan: 'pro', roles: ['admin', 'ops'] }, authenticated: true },
      limits: [
        { name: 'per-sub', client: { by: 'jwt', claim: 'org_id' }, capacity: 10, refill: 10, period: '1m' },
        {
          name: 'per-tenant',
          client: { by: 'header', name: 'x-tenant', secret: true },
          capacity: 5,
          refill: 5,
          period: '1m',
        },
      ],
    };
    const yaml = formatRulesFile([asStored(tiered, 3)], 'yaml');
    expect(yaml).toContain('claims: { plan: pro, roles: [ admin, ops ] }');
    expect(yaml).toContain('authenticated: true');
    const [parsed] = parseRulesFile(yaml, 'yaml');
    expect(parsed).toEqual(tiered);
    expect(changedFields(parsed!, asStored(tiered, 3))).toEqual([]);
  });

  it('reports a bad duration inside a limit with what is wrong with it', () => {
    const problems = problemsOf(`rules:
  - name: s
    match: { path: /s }
    limits:
      - { name: day, algorithm: sliding-window, max: 5, window: a day }
`);
    expect(problems).toEqual([
      {
        where: 'rules[0] (s).limits.0.window',
        message: '"a day" is not a duration like "500ms", "1s", "1m", "1h" or "1d"',
      },
    ]);
  });
});
