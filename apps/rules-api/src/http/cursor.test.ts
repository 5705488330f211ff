import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor } from './cursor.js';

describe('cursors', () => {
  it('round-trip any position (200 random cases)', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ maxLength: 20 }), fc.oneof(fc.string({ maxLength: 64 }), fc.integer())),
        (p) => {
          const cursor = encodeCursor(p);
          expect(cursor).toMatch(/^[A-Za-z0-9_-]*$/);
          if (cursor.length > 0 && cursor.length <= 512) expect(decodeCursor(cursor)).toEqual(p);
        },
      ),
      { numRuns: 200 },
    );
  });

  it.each(['', 'not base64!', 'bm90LWpzb24', 'WzEsMl0', 'bnVsbA', 'A'.repeat(513)])('reject %j', (cursor) => {
    expect(decodeCursor(cursor)).toBeUndefined();
  });

  it.each([{ after: 'a\u0000b' }, { after: '\ud800' }, { after: { nested: 1 } }, { before: null }])(
    'reject a position the database cannot take or encodeCursor cannot write: %j',
    (position) => {
      const cursor = Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
      expect(decodeCursor(cursor)).toBeUndefined();
    },
  );
});
