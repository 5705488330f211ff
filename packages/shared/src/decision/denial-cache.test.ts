import { describe, expect, it } from 'vitest';
import type { LimitCheck, LimitSpec, StoreDecision } from '../limiter/limits.js';
import { DenialCache, denialKey } from './denial-cache.js';

const BUCKET: LimitSpec = { algorithm: 'token-bucket', capacity: 10, refill: 1, periodMs: 1000, maxDebt: 10 };
const WINDOW: LimitSpec = { algorithm: 'sliding-window', max: 100, windowMs: 60_000 };
const CHECKS: LimitCheck[] = [{ key: '{r:c}', spec: BUCKET, cost: 8 }];
/** the documented debt example's denial (docs/limits.md): balance −6, 7 s until b = 1, 16 s until full */
const denied: StoreDecision = {
  allowed: false,
  deniedIndex: 0,
  retryAfterMs: 7000,
  limits: [{ allowed: false, level: -6, remaining: 0, retryAfterMs: 7000, resetMs: 16000 }],
};

describe('DenialCache', () => {
  it('answers until the store said a request could pass, counted from when the request was sent', () => {
    const cache = new DenialCache(10);
    cache.remember('k', denied, CHECKS, 1000);
    expect(cache.lookup('k', 1000)).toEqual(denied);
    // 2.5 s later: 2.5 tokens back, 4.5 s to wait, 13.5 s to full
    expect(cache.lookup('k', 3500)).toEqual({
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: 4500,
      limits: [{ allowed: false, level: -3.5, remaining: 0, retryAfterMs: 4500, resetMs: 13500 }],
    });
    expect(cache.lookup('k', 7999)?.retryAfterMs).toBe(1);
    expect(cache.lookup('k', 8000)).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('remembers a whole decision over several limits: buckets refill, a window keeps its estimate', () => {
    const cache = new DenialCache(10);
    const checks: LimitCheck[] = [
      { key: '{r:c}:burst', spec: BUCKET, cost: 1 },
      { key: '{r:c}:daily', spec: WINDOW, cost: 1 },
    ];
    const byWindow: StoreDecision = {
      allowed: false,
      deniedIndex: 1,
      retryAfterMs: 30_000,
      limits: [
        { allowed: true, level: 4, remaining: 4, retryAfterMs: 0, resetMs: 6000 },
        { allowed: false, level: 100, remaining: 0, retryAfterMs: 30_000, resetMs: 90_000 },
      ],
    };
    const key = denialKey(checks);
    expect(key).toBe('{r:c}:burst\n{r:c}:daily');
    expect(denialKey(CHECKS)).toBe('{r:c}');
    cache.remember(key, byWindow, checks, 0);
    expect(cache.lookup(key, 2000)).toEqual({
      allowed: false,
      deniedIndex: 1,
      retryAfterMs: 28_000,
      limits: [
        { allowed: true, level: 6, remaining: 6, retryAfterMs: 0, resetMs: 4000 },
        { allowed: false, level: 100, remaining: 0, retryAfterMs: 28_000, resetMs: 88_000 },
      ],
    });
    // a bucket never refills past capacity
    expect(cache.lookup(key, 29_000)?.limits[0]).toMatchObject({ level: 10, remaining: 10, resetMs: 0 });
  });

  it('never remembers an admission or a denial without a wait', () => {
    const cache = new DenialCache(10);
    const admitted: StoreDecision = {
      allowed: true,
      deniedIndex: -1,
      retryAfterMs: 0,
      limits: [{ allowed: true, level: 1, remaining: 1, retryAfterMs: 0, resetMs: 100 }],
    };
    const never: StoreDecision = {
      allowed: false,
      deniedIndex: 0,
      retryAfterMs: 0,
      limits: [{ allowed: false, level: 10, remaining: 10, retryAfterMs: 0, resetMs: 0 }],
    };
    cache.remember('a', admitted, CHECKS, 0);
    cache.remember('b', never, CHECKS, 0);
    expect(cache.lookup('a', 0)).toBeUndefined();
    expect(cache.lookup('b', 0)).toBeUndefined();
  });

  it('is bounded (least recently used go first), can be cleared, and can be off', () => {
    const cache = new DenialCache(2);
    cache.remember('a', denied, CHECKS, 0);
    cache.remember('b', denied, CHECKS, 0);
    cache.remember('c', denied, CHECKS, 0);
    expect(cache.size).toBe(2);
    expect(cache.lookup('a', 1)).toBeUndefined();
    cache.clear();
    expect(cache.lookup('b', 1)).toBeUndefined();
    const off = new DenialCache(0);
    off.remember('a', denied, CHECKS, 0);
    expect(off.lookup('a', 1)).toBeUndefined();
  });
});
