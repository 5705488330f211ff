import type { Rule, RuleInput } from '@sluice/shared';
import { describe, expect, it } from 'vitest';
import { changedFields, formatPlan, planChanges } from './plan.js';

/** A rule as the API would return it for `input` (defaults filled in). */
function stored(input: RuleInput, version = 1): Rule {
  return {
    id: `00000000-0000-4000-8000-${String(version).padStart(12, '0')}`,
    name: input.name,
    ...(input.description !== undefined ? { description: input.description } : {}),
    match: input.match,
    client: input.client ?? { by: 'ip' },
    limit: input.limit,
    cost: input.cost ?? 1,
    maxDebt: input.maxDebt ?? input.limit.capacity,
    enabled: input.enabled ?? true,
    shadow: input.shadow ?? false,
    priority: input.priority ?? 0,
    version,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  };
}

const perIp: RuleInput = {
  name: 'per-ip',
  match: { path: '/api/**' },
  limit: { capacity: 5, refill: 5, period: '1m' },
};

describe('changedFields', () => {
  it('treats defaults left out of the file as equal to the stored values', () => {
    expect(changedFields(perIp, stored(perIp))).toEqual([]);
    const explicit: RuleInput = { ...perIp, cost: 1, maxDebt: 5, enabled: true, shadow: false, priority: 0 };
    expect(changedFields(explicit, stored(perIp))).toEqual([]);
  });

  it('compares meaning, not spelling: durations, method order, header and host case', () => {
    const a: RuleInput = {
      name: 'a',
      match: { path: '/x', methods: ['POST', 'GET'], host: 'API.example.com' },
      client: { by: 'header', name: 'X-Api-Key' },
      limit: { capacity: 1, refill: 1, period: '60s' },
    };
    const b: RuleInput = {
      ...a,
      match: { path: '/x', methods: ['GET', 'POST'], host: 'api.example.com' },
      client: { by: 'header', name: 'x-api-key' },
      limit: { capacity: 1, refill: 1, period: 60_000 },
    };
    expect(changedFields(a, stored(b))).toEqual([]);
    expect(
      changedFields({ ...a, match: { path: '/x', methods: [] } }, stored({ ...a, match: { path: '/x' } })),
    ).toEqual([]);
  });

  it('names each differing field', () => {
    const changed: RuleInput = {
      ...perIp,
      limit: { ...perIp.limit, capacity: 50 },
      shadow: true,
      description: 'd',
    };
    expect(changedFields(changed, stored(perIp)).sort()).toEqual(
      ['description', 'limit.capacity', 'maxDebt', 'shadow'].sort(),
    );
  });

  it('keeps an explicit maxDebt apart from capacity', () => {
    const withDebt: RuleInput = { ...perIp, maxDebt: 5 };
    expect(changedFields({ ...withDebt, limit: { ...perIp.limit, capacity: 9 } }, stored(perIp))).toEqual([
      'limit.capacity',
    ]);
  });
});

describe('planChanges', () => {
  const other: RuleInput = {
    name: 'other',
    match: { path: '/o' },
    limit: { capacity: 1, refill: 1, period: '1s' },
  };

  it('creates missing rules, updates changed ones with the version it saw, keeps the rest', () => {
    const changed: RuleInput = { ...perIp, cost: 2 };
    const fresh: RuleInput = { ...other, name: 'fresh' };
    const plan = planChanges([changed, fresh], [stored(perIp, 4), stored(other, 2)]);
    expect(plan.steps.map((s) => [s.action, s.name])).toEqual([
      ['create', 'fresh'],
      ['keep', 'other'],
      ['update', 'per-ip'],
    ]);
    const update = plan.steps.find((s) => s.action === 'update');
    expect(update).toMatchObject({ version: 4, changedFields: ['cost'], input: changed });
    expect(plan.counts).toEqual({ create: 1, update: 1, unchanged: 0, delete: 0, keep: 1 });
    expect(plan.hasChanges).toBe(true);
  });

  it('deletes rules the file does not name only with prune', () => {
    const plan = planChanges([perIp], [stored(perIp), stored(other, 3)], { prune: true });
    expect(plan.steps).toEqual([
      { action: 'delete', name: 'other', id: stored(other, 3).id, version: 3 },
      { action: 'unchanged', name: 'per-ip', id: stored(perIp).id, version: 1 },
    ]);
  });

  it('with createOnly, never updates or deletes', () => {
    const plan = planChanges([{ ...perIp, cost: 3 }, other], [stored(perIp)], {
      createOnly: true,
      prune: true,
    });
    expect(plan.steps.map((s) => s.action)).toEqual(['create', 'keep']);
    expect(plan.steps[1]).toMatchObject({ reason: 'create-only' });
  });

  it('has no changes when the server already matches', () => {
    const plan = planChanges([perIp, other], [stored(other), stored(perIp)], { prune: true });
    expect(plan.hasChanges).toBe(false);
    expect(formatPlan(plan)).toBe(
      '  = unchanged other\n  = unchanged per-ip\n0 to create, 0 to update, 0 to delete, 2 unchanged.',
    );
  });
});
