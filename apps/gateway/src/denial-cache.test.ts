import type { BucketLimits } from '@sluice/shared';
import { describe, expect, it } from 'vitest';
import { DenialCache } from './denial-cache.js';

const LIMITS: BucketLimits = { capacity: 10, refill: 1, periodMs: 1000, maxDebt: 10 };
const denied = { allowed: false, balance: -6, retryAfterMs: 7000, fullInMs: 16000 };

describe('DenialCache', () => {
  it('answers until the store said a request could pass, counted from when the request was sent', () => {
    const cache = new DenialCache(10);
    cache.remember('k', denied, LIMITS, 1000);
    expect(cache.lookup('k', 1000)).toEqual({
      allowed: false,
      balance: -6,
      retryAfterMs: 7000,
      fullInMs: 16000,
    });
    // 2.5 s later: 2.5 tokens back, 4.5 s to wait, 13.5 s to full
    expect(cache.lookup('k', 3500)).toEqual({
      allowed: false,
      balance: -3.5,
      retryAfterMs: 4500,
      fullInMs: 13500,
    });
    expect(cache.lookup('k', 7999)?.retryAfterMs).toBe(1);
    expect(cache.lookup('k', 8000)).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('never remembers an admission or a denial without a wait', () => {
    const cache = new DenialCache(10);
    cache.remember('a', { allowed: true, balance: 1, retryAfterMs: 0, fullInMs: 100 }, LIMITS, 0);
    cache.remember('b', { allowed: false, balance: 10, retryAfterMs: 0, fullInMs: 0 }, LIMITS, 0);
    expect(cache.lookup('a', 0)).toBeUndefined();
    expect(cache.lookup('b', 0)).toBeUndefined();
  });

  it('is bounded (least recently used go first), can be cleared, and can be off', () => {
    const cache = new DenialCache(2);
    cache.remember('a', denied, LIMITS, 0);
    cache.remember('b', denied, LIMITS, 0);
    cache.remember('c', denied, LIMITS, 0);
    expect(cache.size).toBe(2);
    expect(cache.lookup('a', 1)).toBeUndefined();
    cache.clear();
    expect(cache.lookup('b', 1)).toBeUndefined();
    const off = new DenialCache(0);
    off.remember('a', denied, LIMITS, 0);
    expect(off.lookup('a', 1)).toBeUndefined();
  });
});
