import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SpaceSaving } from './space-saving.js';

/** A stream of items from a small alphabet (so some repeat), with weights. */
const streamArb = fc.array(
  fc.record({ item: fc.integer({ min: 0, max: 60 }).map(String), weight: fc.integer({ min: 1, max: 5 }) }),
  { maxLength: 400 },
);

function trueCounts(stream: { item: string; weight: number }[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const { item, weight } of stream) counts.set(item, (counts.get(item) ?? 0) + weight);
  return counts;
}

describe('Space-Saving', () => {
  it('is exact while there are no more distinct items than counters', () => {
    fc.assert(
      fc.property(streamArb, fc.integer({ min: 1, max: 80 }), (stream, capacity) => {
        const counts = trueCounts(stream);
        fc.pre(counts.size <= capacity);
        const summary = new SpaceSaving(capacity);
        for (const { item, weight } of stream) summary.add(item, weight);
        expect(new Map(summary.items().map((c) => [c.item, c.count]))).toEqual(counts);
        expect(summary.items().every((c) => c.error === 0)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('never under-counts, over-counts by at most its error, and holds every true heavy hitter', () => {
    fc.assert(
      fc.property(streamArb, fc.integer({ min: 1, max: 20 }), (stream, capacity) => {
        const counts = trueCounts(stream);
        const total = stream.reduce((sum, { weight }) => sum + weight, 0);
        const summary = new SpaceSaving(capacity);
        for (const { item, weight } of stream) summary.add(item, weight);
        for (const { item, count, error } of summary.items()) {
          const truth = counts.get(item) ?? 0;
          expect(count).toBeGreaterThanOrEqual(truth);
          expect(count - error).toBeLessThanOrEqual(truth);
        }
        for (const [item, truth] of counts) {
          if (truth > total / capacity) expect(summary.count(item)).toBeGreaterThanOrEqual(truth);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('holds at most `capacity` items, however many distinct ones arrive', () => {
    fc.assert(
      fc.property(
        fc.array(fc.string(), { maxLength: 500 }),
        fc.integer({ min: 1, max: 30 }),
        (items, capacity) => {
          const summary = new SpaceSaving(capacity);
          for (const item of items) summary.add(item);
          expect(summary.size).toBeLessThanOrEqual(capacity);
          expect(summary.items().length).toBe(summary.size);
        },
      ),
    );
  });
});
