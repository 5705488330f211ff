import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  boundedKey,
  forwardedClientIp,
  headerClientKey,
  ipClientKey,
  MAX_CLIENT_KEY_BYTES,
  parseIPv6,
} from './client-key.js';

describe('ipClientKey', () => {
  it('keeps IPv4 as is and maps IPv4-mapped IPv6 to IPv4', () => {
    expect(ipClientKey('203.0.113.7')).toBe('ip:203.0.113.7');
    expect(ipClientKey('::ffff:203.0.113.7')).toBe('ip:203.0.113.7');
    expect(ipClientKey('::FFFF:cb00:7107')).toBe('ip:203.0.113.7');
  });

  it('keys IPv6 by its /64, whatever the spelling', () => {
    const key = 'ip:2001:db8:1:2::/64';
    expect(ipClientKey('2001:db8:1:2::1')).toBe(key);
    expect(ipClientKey('2001:0DB8:0001:0002:aaaa:bbbb:cccc:dddd')).toBe(key);
    expect(ipClientKey('2001:db8:1:2:0:0:0:0')).toBe(key);
    expect(ipClientKey('[2001:db8:1:2::9]')).toBe(key);
    expect(ipClientKey('2001:db8:1:2::1.2.3.4')).toBe(key);
    expect(ipClientKey('fe80::1%eth0')).toBe('ip:fe80:0:0:0::/64');
    expect(ipClientKey('::1')).toBe('ip:0:0:0:0::/64');
    expect(ipClientKey('2001:db8:1:3::1')).not.toBe(key);
    expect(ipClientKey('2001:db8::')).toBe('ip:2001:db8:0:0::/64');
  });

  it('keeps what is not an address (a trusted proxy sent garbage) but bounds it', () => {
    expect(ipClientKey('unknown')).toBe('ip:unknown');
    expect(ipClientKey('1::2::3')).toBe('ip:1::2::3');
    expect(ipClientKey(undefined)).toBe('ip:unknown');
    expect(ipClientKey(`x:${'a'.repeat(400)}`)).toMatch(/^ip:[0-9a-f]{64}$/);
  });

  it('agrees with a reference expansion on random addresses', () => {
    fc.assert(
      fc.property(fc.ipV6(), (address) => {
        const groups = parseIPv6(address);
        expect(groups).toHaveLength(8);
        // two spellings of the same address give the same key
        const full = groups!.map((g) => g.toString(16).padStart(4, '0')).join(':');
        expect(ipClientKey(full)).toBe(ipClientKey(address));
      }),
      { numRuns: 500 },
    );
  });
});

describe('forwarded client addresses', () => {
  it('drops the port a proxy may append, so one client has one key', () => {
    expect(forwardedClientIp('5.5.5.5:1234')).toBe('5.5.5.5');
    expect(forwardedClientIp('[2001:db8::1]:443')).toBe('2001:db8::1');
    expect(forwardedClientIp('[2001:db8::1]')).toBe('2001:db8::1');
    expect(forwardedClientIp('2001:db8::1')).toBe('2001:db8::1');
    expect(ipClientKey('5.5.5.5:1234')).toBe(ipClientKey('5.5.5.5'));
    expect(ipClientKey('[2001:db8:1:2::1]:443')).toBe(ipClientKey('2001:db8:1:2::7'));
  });

  it('refuses what is not an IP address in canonical form', () => {
    for (const value of [
      '005.005.005.005',
      '05.5.5.5',
      '5.5.5',
      '0x5.5.5.5',
      '5.5.5.5:',
      '5.5.5.5:http',
      '5.5.5.5:123456',
      '[5.5.5.5]:80',
      '[2001:db8::1]x',
      '2001:db8::1:80:',
      'unknown',
      '',
      undefined,
    ]) {
      expect(forwardedClientIp(value), String(value)).toBeUndefined();
    }
  });
});

describe('header and size bounds', () => {
  it('prefixes header values and treats empty as absent', () => {
    expect(headerClientKey('alpha')).toBe('header:alpha');
    expect(headerClientKey(['first', 'second'])).toBe('header:first');
    expect(headerClientKey('')).toBeUndefined();
    expect(headerClientKey(undefined)).toBeUndefined();
  });

  it('replaces values longer than 256 bytes by their SHA-256 in hex, counting bytes, not characters', () => {
    const exact = 'a'.repeat(MAX_CLIENT_KEY_BYTES);
    expect(boundedKey('header', exact)).toBe(`header:${exact}`);
    const over = `${exact}a`;
    expect(boundedKey('header', over)).toBe(`header:${createHash('sha256').update(over).digest('hex')}`);
    // 128 two-byte characters: 128 characters but 256 bytes: kept
    const wide = 'é'.repeat(128);
    expect(boundedKey('header', wide)).toBe(`header:${wide}`);
    // 129 of them: 258 bytes: hashed
    expect(headerClientKey('é'.repeat(129))).toMatch(/^header:[0-9a-f]{64}$/);
  });
});
