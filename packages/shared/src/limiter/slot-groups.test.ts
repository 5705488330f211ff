import { describe, expect, it } from 'vitest';
import { limitKey } from './limits.js';
import { hashTagOf, slotGroups, slotOf } from './slot-groups.js';

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

describe('slotOf', () => {
  it('is CLUSTER KEYSLOT: CRC16 of the hash tag, mod 16384', () => {
    // values from Redis (CLUSTER KEYSLOT) and its cluster spec (CRC16 of "123456789" is 0x31C3)
    expect(slotOf('foo')).toBe(12_182);
    expect(slotOf('bar')).toBe(5_061);
    expect(slotOf('123456789')).toBe(0x31c3 % 16_384);
    expect(slotOf('{foo}:anything')).toBe(12_182);
    expect(slotOf('sluice:{r1:ip:1.2.3.4}:burst')).toBe(slotOf('r1:ip:1.2.3.4'));
  });
});
