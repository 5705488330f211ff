import { describe, expect, it } from 'vitest';
import { ROUND_MS, roundPlan, TRAFFIC_ROUNDS } from './traffic.js';

describe('pnpm demo:traffic', () => {
  it('is short and bounded: a few hundred requests over about 10 s, from loopback addresses only', () => {
    const total = roundPlan().length * TRAFFIC_ROUNDS;
    expect(total).toBeGreaterThanOrEqual(200);
    expect(total).toBeLessThanOrEqual(400);
    expect(TRAFFIC_ROUNDS * ROUND_MS).toBeLessThanOrEqual(10_000);
    for (const planned of roundPlan()) expect(planned.from).toMatch(/^127\.0\.0\.\d{1,3}$/);
  });

  it('sends some clients over their limits and some not, on several rules', () => {
    const labels = new Set(roundPlan().map((p) => p.label));
    expect(labels.size).toBeGreaterThanOrEqual(5);
    const paths = new Set(roundPlan().map((p) => p.path.split('/')[2]));
    expect([...paths].sort()).toEqual(['beta', 'hello', 'orders', 'search']);
  });
});
