import { type Rule, type RuleInput, type RuleInputV1, withDefaults } from '@sluice/shared';
import { describe, expect, it } from 'vitest';
import { changedFields, formatPlan, planChanges } from './plan.js';

/** A rule as the API would return it for `input` (defaults filled in, the way the API fills them). */
function stored(input: RuleInput, version = 1): Rule {
  return {
    id: `00000000-0000-4000-8000-${String(version).padStart(12, '0')}`,
    ...withDefaults(input),
    version,
    createdAt: '2026-11-25T12:00:00.000Z',
    updatedAt: '2026-11-25T12:00:00.000Z',
  };
}

const perIp: RuleInputV1 = {
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

/** A stacked rule as a user writes it: burst and daily per key, a cap for everyone. */
const stacked: RuleInput = {
  name: 'orders',
  match: { path: '/orders/**', headers: { 'x-tier': 'free' }, clientIps: ['203.0.113.0/24', '198.51.100.7'] },
  limits: [
    { name: 'burst', client: { by: 'header', name: 'x-api-key' }, capacity: 5, refill: 1, period: '1s' },
    {
      name: 'daily',
      client: { by: 'header', name: 'x-api-key' },
      algorithm: 'sliding-window',
      max: 1000,
      window: '1d',
    },
    { name: 'everyone', client: { by: 'global' }, capacity: 100, refill: 100, period: '1s' },
  ],
};
const limitsOf = (input: RuleInput) => input.limits ?? [];
/** `stacked` with limit `name` replaced by `edit(limit)` (or dropped when `edit` returns undefined). */
function withLimit(
  name: string,
  edit: (
    limit: NonNullable<RuleInput['limits']>[number],
  ) => NonNullable<RuleInput['limits']>[number] | undefined,
  input: RuleInput = stacked,
): RuleInput {
  return {
    ...input,
    limits: limitsOf(input).flatMap((limit) => {
      if (limit.name !== name) return [limit];
      const edited = edit(limit);
      return edited === undefined ? [] : [edited];
    }),
  };
}

describe('changedFields on stacked rules (limits)', () => {
  it('finds no change in a stacked rule spelled differently', () => {
    expect(changedFields(stacked, stored(stacked))).toEqual([]);
    const respelled: RuleInput = {
      ...stacked,
      match: {
        path: '/orders/**',
        headers: { 'X-Tier': 'free' },
        clientIps: ['198.51.100.7/32', '203.0.113.0/24', '198.51.100.7'],
        caseInsensitive: false,
      },
      cost: 1,
      limits: [
        {
          name: 'burst',
          client: { by: 'header', name: 'X-API-Key' },
          algorithm: 'token-bucket',
          capacity: 5,
          refill: 1,
          period: 1000,
          maxDebt: 5,
          cost: 1,
        },
        { ...limitsOf(stacked)[1]!, window: '24h' },
        { ...limitsOf(stacked)[2]!, period: '1000ms' },
      ],
    };
    expect(changedFields(respelled, stored(stacked))).toEqual([]);
  });

  it('names the field inside the limit that changed, by limit name', () => {
    expect(
      changedFields(
        withLimit('burst', (l) => ({ ...l, capacity: 10 })),
        stored(stacked),
      ),
    ).toEqual(['limits.burst.capacity', 'limits.burst.maxDebt']);
    expect(
      changedFields(
        withLimit('daily', (l) => ({ ...l, window: '1h' })),
        stored(stacked),
      ),
    ).toEqual(['limits.daily.window']);
    expect(
      changedFields(
        withLimit('everyone', (l) => ({ ...l, client: { by: 'ip' } })),
        stored(stacked),
      ),
    ).toEqual(['limits.everyone.client']);
  });

  it("compares each limit's real cost: its own, else the rule's", () => {
    expect(changedFields({ ...stacked, cost: 2 }, stored(stacked))).toEqual([
      'limits.burst.cost',
      'limits.daily.cost',
      'limits.everyone.cost',
    ]);
    const ownCost = withLimit('daily', (l) => ({ ...l, cost: 2 }));
    expect(changedFields(ownCost, stored(stacked))).toEqual(['limits.daily.cost']);
    expect(
      changedFields(
        withLimit('daily', (l) => ({ ...l, cost: 2 }), { ...stacked, cost: 2 }),
        stored(
          withLimit(
            'burst',
            (l) => ({ ...l, cost: 2 }),
            withLimit('everyone', (l) => ({ ...l, cost: 2 }), ownCost),
          ),
        ),
      ),
    ).toEqual([]);
  });

  it('names a limit added, removed or renamed as a whole, and a new order', () => {
    const withoutDaily = withLimit('daily', () => undefined);
    expect(changedFields(stacked, stored(withoutDaily))).toEqual(['limits.daily (added)']);
    expect(changedFields(withoutDaily, stored(stacked))).toEqual(['limits.daily (removed)']);
    const renamed = withLimit('daily', (l) => ({ ...l, name: 'per-day' }));
    expect(changedFields(renamed, stored(stacked))).toEqual(['limits.per-day (renamed from daily)']);
    const renamedAndChanged = withLimit('daily', (l) => ({ ...l, name: 'per-day', max: 5 }));
    expect(changedFields(renamedAndChanged, stored(stacked))).toEqual([
      'limits.per-day (added)',
      'limits.daily (removed)',
    ]);
    const reordered: RuleInput = { ...stacked, limits: [...limitsOf(stacked)].reverse() };
    expect(changedFields(reordered, stored(stacked))).toEqual(['limits (order)']);
  });

  it('names header and client-IP conditions; header names in lower case, IP lists as sets', () => {
    const freeToPaid: RuleInput = { ...stacked, match: { ...stacked.match, headers: { 'X-Tier': 'paid' } } };
    expect(changedFields(freeToPaid, stored(stacked))).toEqual(['match.headers.x-tier']);
    const extraHeader: RuleInput = {
      ...stacked,
      match: { ...stacked.match, headers: { 'x-tier': 'free', 'X-Region': 'eu' } },
    };
    expect(changedFields(extraHeader, stored(stacked))).toEqual(['match.headers.x-region']);
    const otherIps: RuleInput = { ...stacked, match: { ...stacked.match, clientIps: ['203.0.113.0/24'] } };
    expect(changedFields(otherIps, stored(stacked))).toEqual(['match.clientIps']);
    const notIps: RuleInput = { ...stacked, match: { ...stacked.match, notClientIps: ['10.0.0.0/8'] } };
    expect(changedFields(notIps, stored(stacked))).toEqual(['match.notClientIps']);
    const folded: RuleInput = { ...stacked, match: { ...stacked.match, caseInsensitive: true } };
    expect(changedFields(folded, stored(stacked))).toEqual(['match.caseInsensitive']);
  });

  it('names a change of form once, with the fields every form shares', () => {
    expect(changedFields({ ...stacked, priority: 3 }, stored({ ...perIp, name: 'orders' }))).toEqual([
      'limits (was limit)',
      'match.path',
      'match.headers.x-tier',
      'match.clientIps',
      'priority',
    ]);
    const exempt: RuleInput = { name: 'orders', match: stacked.match, unlimited: true };
    expect(changedFields(exempt, stored(stacked))).toEqual(['unlimited (was limits)']);
    expect(changedFields(stacked, stored(exempt))).toEqual(['limits (was unlimited)']);
  });
});

describe('changedFields on identity (jwt clients, claims, secret headers)', () => {
  const tiered: RuleInput = {
    name: 'tiered',
    match: { path: '/api/**', claims: { plan: 'pro', roles: ['admin', 'ops'] }, authenticated: true },
    limits: [{ name: 'per-sub', client: { by: 'jwt' }, capacity: 10, refill: 10, period: '1m' }],
  };

  it('round-trips claims, authenticated and a jwt client with no change', () => {
    expect(changedFields(tiered, stored(tiered))).toEqual([]);
    const spelled: RuleInput = {
      ...tiered,
      match: { ...tiered.match, claims: { roles: ['ops', 'admin'], plan: 'pro' } },
      limits: [{ ...tiered.limits![0]!, client: { by: 'jwt', claim: 'sub' } }],
    };
    expect(changedFields(spelled, stored(tiered))).toEqual([]);
  });

  it('names a changed claim value, claim list, authenticated and the claim a limit keys by', () => {
    const changed: RuleInput = {
      ...tiered,
      match: { path: '/api/**', claims: { plan: 'enterprise', roles: ['admin'] } },
      limits: [{ ...tiered.limits![0]!, client: { by: 'jwt', claim: 'org_id' } }],
    };
    expect(changedFields(changed, stored(tiered))).toEqual([
      'match.claims.plan',
      'match.claims.roles',
      'match.authenticated',
      'limits.per-sub.client',
    ]);
  });

  it('names a header client whose value stops being a secret, not one that says its default', () => {
    const keyed: RuleInputV1 = { ...perIp, client: { by: 'header', name: 'x-api-key' } };
    expect(
      changedFields({ ...keyed, client: { by: 'header', name: 'x-api-key', secret: true } }, stored(keyed)),
    ).toEqual([]);
    expect(
      changedFields({ ...keyed, client: { by: 'header', name: 'x-api-key', secret: false } }, stored(keyed)),
    ).toEqual(['client']);
  });
});

describe('changedFields on exemptions (unlimited)', () => {
  const partner: RuleInput = {
    name: 'partner',
    match: { path: '/orders/**', headers: { 'x-partner': 'acme' } },
    unlimited: true,
    priority: 10,
  };

  it('finds no change in the same exemption, and names what differs', () => {
    expect(changedFields(partner, stored(partner))).toEqual([]);
    expect(changedFields({ ...partner, priority: 1, enabled: false }, stored(partner))).toEqual([
      'enabled',
      'priority',
    ]);
    expect(
      changedFields(
        { ...partner, match: { ...partner.match, headers: { 'x-partner': 'globex' } } },
        stored(partner),
      ),
    ).toEqual(['match.headers.x-partner']);
  });
});

describe('planChanges', () => {
  const other: RuleInputV1 = {
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

  it('says what a created or updated rule will limit, one line per limit under its name', () => {
    const slots: RuleInput = {
      name: 'uploads',
      match: { path: '/uploads/**' },
      limits: [
        { name: 'inflight', client: { by: 'header', name: 'x-api-key' }, algorithm: 'concurrency', max: 3 },
        { name: 'daily', algorithm: 'sliding-window', max: 500, window: '1d' },
      ],
    };
    const plan = planChanges([slots, { ...perIp, cost: 2 }, other], [stored(perIp), stored(other)]);
    expect(formatPlan(plan)).toBe(
      [
        '  = unchanged other',
        '  ~ update    per-ip   (cost)',
        '              5 per client IP, 5 more every 1m (token bucket)',
        '  + create    uploads',
        '              inflight: 3 at once per x-api-key',
        '              daily: 500 per client IP in any 1d (sliding window)',
        '1 to create, 1 to update, 0 to delete, 1 unchanged.',
      ].join('\n'),
    );
  });

  it('has no changes when the server already matches', () => {
    const plan = planChanges([perIp, other], [stored(other), stored(perIp)], { prune: true });
    expect(plan.hasChanges).toBe(false);
    expect(formatPlan(plan)).toBe(
      '  = unchanged other\n  = unchanged per-ip\n0 to create, 0 to update, 0 to delete, 2 unchanged.',
    );
  });
});
