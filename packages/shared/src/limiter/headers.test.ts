import { describe, expect, it } from 'vitest';
import {
  headerItemName,
  policyHeader,
  policyItem,
  rateLimitHeader,
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
  return {
    policy: policyHeader([{ item, spec }]),
    rateLimit: rateLimitHeader([item], decision!),
    retryAfter: decision!.allowed ? undefined : retryAfterSeconds(decision!),
  };
}

describe('decision headers', () => {
  it('a capacity-1 bucket refilling 1 per hour, just emptied: t=3600, the same as w', async () => {
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

  it('the documented debt example: capacity 10, 1/s, cost 8, maxDebt 10 → r=2;t=8, r=0;t=16, then Retry-After 7', async () => {
    const spec = bucket(10, 1, 1_000, 10);
    expect((await headersAfter('debt', spec, [8])).rateLimit).toBe('"debt";r=2;t=8');
    expect((await headersAfter('debt', spec, [8, 8])).rateLimit).toBe('"debt";r=0;t=16');
    expect(await headersAfter('debt', spec, [8, 8, 8])).toEqual({
      policy: '"debt";q=10;w=10',
      rateLimit: '"debt";r=0;t=16',
      retryAfter: 7,
    });
  });

  it('a sliding window: q=max, w=window seconds, r=floor(max − estimate), t until the estimate is 0', async () => {
    const spec = window(10, 60_000);
    // 0.5 ms into a window: 3 counted now, nothing before; the estimate falls to 0 two windows on
    expect(await headersAfter('daily', spec, [3])).toEqual({
      policy: '"daily";q=10;w=60',
      rateLimit: '"daily";r=7;t=120',
      retryAfter: undefined,
    });
    expect((await headersAfter('daily', spec, [2.5])).rateLimit).toBe('"daily";r=7;t=120');
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
    const decision: StoreDecision = {
      allowed: false,
      deniedIndex: 1,
      retryAfterMs: 2_500,
      limits: [
        { allowed: true, level: 12.5, remaining: 12, retryAfterMs: 0, resetMs: 750 },
        { allowed: false, level: 10_000, remaining: 0, retryAfterMs: 2_500, resetMs: 172_800_000 },
      ],
    };
    expect(rateLimitHeader([burst, daily], decision)).toBe(
      '"orders.burst";r=12;t=1, "orders.daily";r=0;t=172800',
    );
  });
});
