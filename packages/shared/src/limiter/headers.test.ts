import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { tokenBucketModel } from './algorithms/token-bucket/model.js';
import {
  headerItemName,
  moreQuotaMs,
  partitionKey,
  policyHeader,
  policyItem,
  rateLimitHeader,
  rateLimitItem,
  remainingOf,
  retryAfterSeconds,
  wholeSecondsUp,
} from './headers.js';
import type { LimitSpec, StoreDecision, TokenBucketSpec } from './limits.js';
import { MemoryStore } from './memory-store.js';

const bucket = (capacity: number, refill: number, periodMs: number, maxDebt = capacity): TokenBucketSpec => ({
  algorithm: 'token-bucket',
  capacity,
  refill,
  periodMs,
  maxDebt,
});
const window = (max: number, windowMs: number): LimitSpec => ({ algorithm: 'sliding-window', max, windowMs });

/** The headers after requests of `costs`, on a clock 0.5 ms past a whole minute since the epoch. */
async function headersAfter(name: string, spec: LimitSpec, costs: number[]) {
  const store = new MemoryStore({ now: () => 1_699_999_980_000.5, sweepIntervalMs: 0 });
  const item = headerItemName(name, '');
  let decision: StoreDecision | undefined;
  for (const cost of costs) decision = await store.acquire([{ key: `{r:${name}}`, spec, cost }]);
  await store.close();
  const limit = { headerItem: item, spec, clientBy: 'global' };
  return {
    policy: policyHeader([{ item, spec }]),
    rateLimit: rateLimitHeader([limit], { ...decision!, clientKeys: ['global'] }),
    retryAfter: decision!.allowed ? undefined : retryAfterSeconds(decision!),
  };
}

describe('decision headers (draft-11)', () => {
  it('a capacity-1 bucket refilling 1 per hour, just emptied: t=3600 (one more token is the whole quota)', async () => {
    expect(await headersAfter('hourly', bucket(1, 1, 3_600_000), [1])).toEqual({
      policy: '"hourly";q=1;w=3600',
      rateLimit: '"hourly";r=0;t=3600',
      retryAfter: undefined,
    });
    expect(await headersAfter('hourly', bucket(1, 1, 3_600_000), [1, 1])).toEqual({
      policy: '"hourly";q=1;w=3600',
      rateLimit: '"hourly";r=0;t=3600',
      retryAfter: 3600,
    });
  });

  it('t is until r grows by one, not until full: capacity 100 per minute after 40 requests says t=1, not t=24', async () => {
    const spec = bucket(100, 100, 60_000);
    expect((await headersAfter('minute', spec, Array(40).fill(1))).rateLimit).toBe('"minute";r=60;t=1');
    expect((await headersAfter('minute', spec, [0.5])).rateLimit).toBe('"minute";r=99;t=1');
    // a full bucket: no more quota can come, t=0
    const full = { allowed: true, level: 100, remaining: 100, retryAfterMs: 0, resetMs: 0 };
    expect(rateLimitItem({ headerItem: '"minute"', spec, clientBy: 'global' }, full, 'global', 0)).toBe(
      '"minute";r=100;t=0',
    );
  });

  it('the documented debt example: capacity 10, 1/s, cost 8, maxDebt 10 → r=2;t=1, r=0;t=7, then Retry-After 7 = t', async () => {
    const spec = bucket(10, 1, 1_000, 10);
    expect((await headersAfter('debt', spec, [8])).rateLimit).toBe('"debt";r=2;t=1');
    expect((await headersAfter('debt', spec, [8, 8])).rateLimit).toBe('"debt";r=0;t=7');
    expect(await headersAfter('debt', spec, [8, 8, 8])).toEqual({
      policy: '"debt";q=10;w=10',
      rateLimit: '"debt";r=0;t=7',
      retryAfter: 7,
    });
  });

  it('a denial of cost 1 says t = Retry-After, whatever the refill rate', async () => {
    for (const [refill, periodMs] of [
      [1, 1_000],
      [3, 1_000],
      [100, 60_000],
      [7, 3_600_000],
    ] as const) {
      const spec = bucket(5, refill, periodMs, 0);
      const denied = await headersAfter('deny', spec, [1, 1, 1, 1, 1, 1]);
      expect(denied.retryAfter).toBeGreaterThan(0);
      expect(denied.rateLimit).toBe(`"deny";r=0;t=${denied.retryAfter}`);
    }
  });

  it('a sliding window: q=max, w=window seconds, r=floor(max − estimate), t until the estimate leaves room for one more', async () => {
    const spec = window(10, 60_000);
    // 0.5 ms into a window: 3 counted now, nothing before; flat for 60 s, then 3 → 2 in 20 s more
    expect(await headersAfter('daily', spec, [3])).toEqual({
      policy: '"daily";q=10;w=60',
      rateLimit: '"daily";r=7;t=80',
      retryAfter: undefined,
    });
    expect((await headersAfter('daily', spec, [2.5])).rateLimit).toBe('"daily";r=7;t=72');
    // full: the denial's Retry-After (estimate 9 after 66 s) is t
    const full = await headersAfter('daily', spec, Array(11).fill(1));
    expect(full).toMatchObject({ rateLimit: '"daily";r=0;t=66', retryAfter: 66 });
  });

  it('fractional quotas are written as Integers: q rounded down, r and t whole', async () => {
    const tenths = bucket(2.5, 1, 1_000, 0);
    expect(await headersAfter('frac', tenths, [1])).toEqual({
      policy: '"frac";q=2;w=3',
      rateLimit: '"frac";r=1;t=1',
      retryAfter: undefined,
    });
    // r already at q's whole units (2 of 2.5): nothing more to come
    expect((await headersAfter('frac', tenths, [0.25])).rateLimit).toBe('"frac";r=2;t=0');
    expect((await headersAfter('frac', window(0.5, 1_000), [0.25])).rateLimit).toBe('"frac";r=0;t=0');
    expect(policyItem('"p"', bucket(0.01, 1, 1_000))).toBe('"p";q=0;w=1');
  });

  it('rounds seconds up, never reports negative units, and says Retry-After 1 at least when denied', () => {
    expect([0, 1, 999, 1_000, 1_001, 7_000, 7_001].map(wholeSecondsUp)).toEqual([0, 1, 1, 1, 2, 7, 8]);
    expect(wholeSecondsUp(1e300)).toBe(999_999_999_999_999);
    expect(remainingOf(bucket(10, 1, 1_000), -6)).toBe(0);
    expect(remainingOf(bucket(10, 1, 1_000), 2.9)).toBe(2);
    expect(remainingOf(window(10, 1_000), 7.5)).toBe(2);
    expect(remainingOf(window(10, 1_000), 10)).toBe(0);
    expect(retryAfterSeconds({ retryAfterMs: 0 })).toBe(1);
    expect(retryAfterSeconds({ retryAfterMs: 1 })).toBe(1);
    expect(retryAfterSeconds({ retryAfterMs: 1_001 })).toBe(2);
  });

  it('policy items: w is at least 1 and exact for whole refills; a concurrency limit has a unit, no window', () => {
    const item = (spec: LimitSpec) => policyItem('"a"', spec);
    expect(item(bucket(100, 100, 60_000))).toBe('"a";q=100;w=60');
    expect(item(bucket(10, 3, 1_000))).toBe('"a";q=10;w=4');
    expect(item(bucket(3, 0.1, 1_000))).toBe('"a";q=3;w=30');
    expect(item(bucket(1, 1_000, 1_000))).toBe('"a";q=1;w=1');
    expect(item(bucket(10, 1e-300, 1_000))).toBe('"a";q=10;w=1000000000000');
    expect(item(window(5, 500))).toBe('"a";q=5;w=1');
    expect(item(window(10_000, 86_400_000))).toBe('"a";q=10000;w=86400');
    expect(item({ algorithm: 'concurrency', max: 5, leaseMs: 35_000 })).toBe(
      '"a";q=5;qu="concurrent-requests"',
    );
  });

  it('r of a concurrency limit is its free slots', () => {
    const slots: LimitSpec = { algorithm: 'concurrency', max: 5, leaseMs: 35_000 };
    expect([0, 2, 5, 6].map((held) => remainingOf(slots, held))).toEqual([5, 3, 0, 0]);
  });

  it('one item per limit, in order, named "<rule>.<limit>" (a v1 rule\'s limit is the rule itself)', () => {
    const burst = headerItemName('orders', 'burst');
    const daily = headerItemName('orders', 'daily');
    expect([headerItemName('orders', ''), burst, headerItemName('a"b', '')]).toEqual([
      '"orders"',
      '"orders.burst"',
      '"a\\"b"',
    ]);
    expect(
      policyHeader([
        { item: burst, spec: bucket(20, 10, 1_000) },
        { item: daily, spec: window(10_000, 86_400_000) },
      ]),
    ).toBe('"orders.burst";q=20;w=2, "orders.daily";q=10000;w=86400');
    const decision = {
      allowed: false,
      deniedIndex: 1,
      retryAfterMs: 2_500,
      limits: [
        { allowed: true, level: 12.5, remaining: 12, retryAfterMs: 0, resetMs: 750 },
        { allowed: false, level: 10_000, remaining: 0, retryAfterMs: 2_500, resetMs: 172_800_000 },
      ],
      clientKeys: ['header:k1', 'global'],
    };
    expect(
      rateLimitHeader(
        [
          { headerItem: burst, spec: bucket(20, 10, 1_000), clientBy: 'header' },
          { headerItem: daily, spec: window(10_000, 86_400_000), clientBy: 'global' },
        ],
        decision,
      ),
    ).toBe(`"orders.burst";r=12;t=1;pk=${partitionKey('header:k1')}, "orders.daily";r=0;t=3`);
  });

  it('pk: a Byte Sequence of a hash of the client key, the same for the same key, never the key', () => {
    const pk = partitionKey('header:secret-api-key-123');
    expect(pk).toMatch(/^:[A-Za-z0-9+/]{16}:$/);
    expect(Buffer.from(pk.slice(1, -1), 'base64').toString('latin1')).not.toContain('secret');
    expect(partitionKey('header:secret-api-key-123')).toBe(pk);
    expect(partitionKey('header:secret-api-key-124')).not.toBe(pk);
    expect(partitionKey('ip:203.0.113.7')).toBe(
      `:${createHash('sha256').update('ip:203.0.113.7').digest().subarray(0, 12).toString('base64')}:`,
    );
  });

  it('a concurrency limit: t=0 with a free slot, t=1 when all are held', () => {
    const slots: LimitSpec = { algorithm: 'concurrency', max: 2, leaseMs: 35_000 };
    const limit = { headerItem: '"c"', spec: slots, clientBy: 'ip' };
    const at = (held: number, allowed: boolean) => ({
      allowed,
      level: held,
      remaining: remainingOf(slots, held),
      retryAfterMs: allowed ? 0 : 1_000,
      resetMs: 0,
    });
    const pk = partitionKey('ip:203.0.113.7');
    expect(rateLimitItem(limit, at(1, true), 'ip:203.0.113.7', 0)).toBe(`"c";r=1;t=0;pk=${pk}`);
    expect(rateLimitItem(limit, at(2, true), 'ip:203.0.113.7', 0)).toBe(`"c";r=0;t=1;pk=${pk}`);
    expect(rateLimitItem(limit, at(2, false), 'ip:203.0.113.7', 1_000)).toBe(`"c";r=0;t=1;pk=${pk}`);
  });
});

describe('t against Retry-After, over random limits', () => {
  it('a token bucket denying a request of cost 1: t is its Retry-After, never more', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.double({ min: 1e-3, max: 1e4, noNaN: true }),
        fc.integer({ min: 1, max: 86_400_000 }),
        fc.double({ min: 0, max: 1e4, noNaN: true }),
        fc.double({ min: 1e-9, max: 1, noNaN: true }),
        (capacity, refill, periodMs, maxDebt, below) => {
          const spec = bucket(capacity, refill, periodMs, maxDebt);
          // a balance below one whole token (down into the debt): a request of cost 1 is denied
          const balance = 1 - below * (1 + maxDebt);
          const verdict = tokenBucketModel.evaluate({ balance, updatedAtMs: 0 }, spec, 1, 0).hold();
          expect(verdict.allowed).toBe(false);
          const outcome = { ...verdict, remaining: remainingOf(spec, verdict.level) };
          const decision = { limits: [outcome], clientKeys: ['global'], retryAfterMs: verdict.retryAfterMs };
          const item = rateLimitHeader([{ headerItem: '"p"', spec, clientBy: 'global' }], decision);
          const t = Number(/;t=(\d+)/.exec(item)![1]);
          expect(t).toBe(wholeSecondsUp(verdict.retryAfterMs));
          expect(t).toBeLessThanOrEqual(retryAfterSeconds(verdict));
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('any admitted token bucket: waiting t seconds gives r + 1 whole tokens, one second less does not', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 1_000 }),
        fc.double({ min: 1e-2, max: 1e3, noNaN: true }),
        fc.integer({ min: 1_000, max: 3_600_000 }),
        fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }),
        (capacity, refill, periodMs, fill) => {
          const spec = bucket(capacity, refill, periodMs, 0);
          const level = fill * (capacity - 1);
          const outcome = {
            allowed: true,
            level,
            remaining: remainingOf(spec, level),
            retryAfterMs: 0,
            resetMs: 0,
          };
          const ms = moreQuotaMs(spec, outcome, 0);
          const later = (atMs: number) =>
            tokenBucketModel.evaluate({ balance: level, updatedAtMs: 0 }, spec, outcome.remaining + 1, atMs);
          expect(later(ms).allowed).toBe(true);
          if (ms > 0) expect(later(ms - 1).allowed).toBe(false);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
