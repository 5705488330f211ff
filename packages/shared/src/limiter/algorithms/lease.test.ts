/** What lease mode may take from a rule's limits (docs/lease-mode.md), as their plug-ins say. */
import { describe, expect, it } from 'vitest';
import type { LimitSpec, TokenBucketSpec } from '../limits.js';
import { leaseRequestsOf, leaseSpecOf } from './lease.js';

const bucket = (capacity: number): TokenBucketSpec => ({
  algorithm: 'token-bucket',
  capacity,
  refill: 10,
  periodMs: 1_000,
  maxDebt: capacity,
});
const window: LimitSpec = { algorithm: 'sliding-window', max: 100, windowMs: 60_000 };
const slots: LimitSpec = { algorithm: 'concurrency', max: 100, leaseMs: 35_000 };

describe('leaseRequestsOf', () => {
  it('a quarter of the smallest bucket, in requests of their cost', () => {
    expect(leaseRequestsOf([{ spec: bucket(100), cost: 1 }])).toBe(25);
    expect(leaseRequestsOf([{ spec: bucket(100), cost: 2 }])).toBe(12);
    expect(
      leaseRequestsOf([
        { spec: bucket(100), cost: 1 },
        { spec: bucket(40), cost: 1 },
      ]),
    ).toBe(10);
  });

  it('0 when fewer than 2 requests fit (a lease of 1 only adds a call)', () => {
    expect(leaseRequestsOf([{ spec: bucket(8), cost: 1 }])).toBe(2);
    expect(leaseRequestsOf([{ spec: bucket(7), cost: 1 }])).toBe(0);
    expect(leaseRequestsOf([{ spec: bucket(100), cost: 30 }])).toBe(0);
    expect(leaseRequestsOf([])).toBe(0);
  });

  it('0 when any limit cannot be leased: sliding windows and concurrency always decide exactly', () => {
    expect(
      leaseRequestsOf([
        { spec: bucket(100), cost: 1 },
        { spec: window, cost: 1 },
      ]),
    ).toBe(0);
    expect(
      leaseRequestsOf([
        { spec: slots, cost: 1 },
        { spec: bucket(100), cost: 1 },
      ]),
    ).toBe(0);
  });
});

describe('leaseSpecOf', () => {
  it('a lease never overdraws a bucket: maxDebt 0, the rest as it is', () => {
    expect(leaseSpecOf(bucket(100))).toEqual({ ...bucket(100), maxDebt: 0 });
    expect(leaseSpecOf(window)).toBe(window);
  });
});
