/** A rule's limits in words, as the console, the CLI plan and the demo banner show them. */
import { describe, expect, it } from 'vitest';
import { withDefaults } from './defaults.js';
import { ruleSummary } from './summary.js';

describe('ruleSummary', () => {
  it('says each limit of a stacked rule in its order, named, in the words of its algorithm', () => {
    const rule = withDefaults({
      name: 'orders',
      match: { path: '/orders/**' },
      limits: [
        { name: 'burst', client: { by: 'header', name: 'X-Api-Key' }, capacity: 5, refill: 1, period: '1s' },
        {
          name: 'daily',
          client: { by: 'header', name: 'x-api-key' },
          algorithm: 'sliding-window',
          max: 100,
          window: '1d',
        },
        { name: 'inflight', algorithm: 'concurrency', max: 5 },
        { name: 'everyone', client: { by: 'global' }, capacity: 30, refill: 30, period: 60_000 },
      ],
    });
    expect(ruleSummary(rule)).toEqual([
      'burst: 5 per x-api-key, 1 more every 1s (token bucket)',
      'daily: 100 per x-api-key in any 1d (sliding window)',
      'inflight: 5 at once per client IP',
      'everyone: 30 for all clients together, 30 more every 60000ms (token bucket)',
    ]);
  });

  it('says a format-1 rule as its one token bucket, without a name', () => {
    const rule = withDefaults({
      name: 'per-ip',
      match: { path: '/**' },
      limit: { capacity: 10, refill: 5, period: '1m' },
    });
    expect(ruleSummary(rule)).toEqual(['10 per client IP, 5 more every 1m (token bucket)']);
  });

  it('says "no limit" for an exemption', () => {
    expect(ruleSummary(withDefaults({ name: 'partner', match: { path: '/**' }, unlimited: true }))).toEqual([
      'no limit',
    ]);
  });
});
