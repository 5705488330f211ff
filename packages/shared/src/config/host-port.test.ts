import { describe, expect, it } from 'vitest';
import { parseHostPort, parseSeedList } from './host-port.js';

describe('parseHostPort', () => {
  it('reads names, IPv4 and bracketed IPv6, the host without its brackets', () => {
    expect(parseHostPort('redis-1:6379')).toEqual({ host: 'redis-1', port: 6379 });
    expect(parseHostPort(' 10.0.0.2:7000 ')).toEqual({ host: '10.0.0.2', port: 7000 });
    expect(parseHostPort('[::1]:7000')).toEqual({ host: '::1', port: 7000 });
    expect(parseHostPort('[2001:db8::7]:1')).toEqual({ host: '2001:db8::7', port: 1 });
    expect(parseHostPort('localhost:65535')).toEqual({ host: 'localhost', port: 65_535 });
  });

  it.each([
    '::1:7000',
    'host',
    'host:',
    'host:0',
    'host:70000',
    'host:065536',
    '[::1]',
    '[nope]:7000',
    '[]:7000',
    'a b:1',
    'redis://r:6379',
    ':6379',
    'host:-1',
  ])('refuses %j', (text) => {
    expect(parseHostPort(text)).toBeUndefined();
  });
});

describe('parseSeedList', () => {
  it('keeps the entries as written, trimmed, empty ones skipped', () => {
    expect(parseSeedList('redis-1:6379, 10.0.0.2:7000,,[::1]:7001')).toEqual({
      value: ['redis-1:6379', '10.0.0.2:7000', '[::1]:7001'],
    });
  });

  it('names the first bad entry and what is wrong with it, on one line', () => {
    const problem = (raw: string) => {
      const parsed = parseSeedList(raw);
      return 'problem' in parsed ? parsed.problem : undefined;
    };
    const shape = 'must be comma-separated host:port (IPv6 in brackets), e.g. redis-1:6379,[::1]:7000';
    expect(problem('r1:1,::1:7000')).toBe(
      `${shape}; "::1:7000" needs brackets around its IPv6 address, e.g. [::1]:7000 (got "r1:1,::1:7000")`,
    );
    expect(problem('host')).toBe(`${shape}; "host" has no port (got "host")`);
    expect(problem('host:0')).toBe(`${shape}; "host:0" has port 0, outside 1–65535 (got "host:0")`);
    expect(problem('host:70000')).toBe(
      `${shape}; "host:70000" has port 70000, outside 1–65535 (got "host:70000")`,
    );
    expect(problem('[zz]:1')).toBe(`${shape}; "[zz]:1" has no IPv6 address in its brackets (got "[zz]:1")`);
    expect(problem(' , ')).toBe(`${shape} (got " , ")`);
  });
});
