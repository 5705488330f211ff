import { describe, expect, it } from 'vitest';
import { limitKey } from './limits.js';
import { hashTagOf, slotGroups } from './slot-groups.js';

describe('hashTagOf', () => {
  it('is the first non-empty {…}, as Redis Cluster hashes it', () => {
    expect(hashTagOf('sluice:{r1:ip:1.2.3.4}:burst')).toBe('r1:ip:1.2.3.4');
    expect(hashTagOf('a{}b{c}')).toBe('a{}b{c}'); // an empty tag: the whole key
    expect(hashTagOf('plain')).toBe('plain');
    expect(hashTagOf('a{b')).toBe('a{b');
  });
});

describe('slotGroups', () => {
  it("keeps one client's limits together and a global limit apart, in the rule's order", () => {
    const keys = [
      limitKey('sluice:', 'r1', 'burst', 'ip:1.2.3.4'),
      limitKey('sluice:', 'r1', 'cap', 'global'),
      limitKey('sluice:', 'r1', 'daily', 'ip:1.2.3.4'),
    ];
    expect(slotGroups(keys)).toEqual([[0, 2], [1]]);
    expect(slotGroups([keys[0]!])).toEqual([[0]]);
  });
});
