import { describe, expect, it } from 'vitest';
import { algorithmChangeNotice, algorithmChanges } from './algorithm-changes.js';
import { withDefaults } from './defaults.js';
import type { RuleInput } from './schema.js';

const bucket = { capacity: 5, refill: 1, period: '1s' };
const v2 = (limits: unknown[]) => withDefaults({ name: 'r', match: { path: '/x' }, limits } as RuleInput);

describe('algorithmChanges', () => {
  it('names each limit that keeps its name and changes algorithm, and nothing else', () => {
    const before = v2([
      { name: 'a', ...bucket },
      { name: 'b', algorithm: 'sliding-window', max: 5, window: '1m' },
      { name: 'c', ...bucket },
      { name: 'gone', ...bucket },
    ]);
    const after = v2([
      { name: 'b', ...bucket },
      { name: 'a', algorithm: 'sliding-window', max: 5, window: '1m' },
      { name: 'c', ...bucket, capacity: 9 },
      { name: 'new', algorithm: 'concurrency', max: 2 },
    ]);
    const changes = algorithmChanges(before, after);
    expect(changes).toEqual([
      { limit: 'b', from: 'sliding-window', to: 'token-bucket' },
      { limit: 'a', from: 'token-bucket', to: 'sliding-window' },
    ]);
    expect(algorithmChangeNotice(changes[1]!)).toBe(
      'limit `a` changes algorithm: its counters start afresh (token-bucket → sliding-window)',
    );
    expect(algorithmChanges(before, before)).toEqual([]);
  });

  it('sees nothing to say about a format-1 rule edited in its numbers, or an exemption', () => {
    const v1 = withDefaults({ name: 'r', match: { path: '/x' }, limit: bucket });
    expect(
      algorithmChanges(
        v1,
        withDefaults({ name: 'r', match: { path: '/x' }, limit: { ...bucket, capacity: 1 } }),
      ),
    ).toEqual([]);
    expect(algorithmChanges(v1, withDefaults({ name: 'r', match: { path: '/x' }, unlimited: true }))).toEqual(
      [],
    );
  });
});
