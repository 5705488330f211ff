/** The UPSTREAMS host entries and the connection timeouts the gateway's admission relies on. */
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseUpstreams } from './config.js';

const REQUIRED = { UPSTREAMS: '/=http://web:3000', RULES_API_URL: 'http://rules-api:8081' };

describe('UPSTREAMS entries naming a host', () => {
  it('normalises the host and sorts longest prefix first, a host entry before a hostless one', () => {
    expect(
      parseUpstreams(
        '/=http://web:1,API.Example.com.:443/=http://api:2,api.example.com/orders=http://orders:3',
      ),
    ).toEqual([
      { prefix: '/orders', origin: 'http://orders:3', host: 'api.example.com' },
      { prefix: '/', origin: 'http://api:2', host: 'api.example.com' },
      { prefix: '/', origin: 'http://web:1' },
    ]);
  });

  it('refuses a host that is not one, and the same host and prefix twice', () => {
    for (const raw of ['u@api.example.com/=http://a:1', 'a..b/=http://a:1', 'a b/=http://a:1']) {
      expect(typeof parseUpstreams(raw), raw).toBe('string');
    }
    expect(typeof parseUpstreams('a.com/x=http://a:1,A.COM./x=http://b:1')).toBe('string');
    expect(Array.isArray(parseUpstreams('a.com/x=http://a:1,/x=http://b:1'))).toBe(true);
  });
});

describe('connection timeouts', () => {
  it('defaults: head 10 s, whole request 120 s, keep-alive 72 s', () => {
    expect(loadConfig(REQUIRED)).toMatchObject({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 120_000,
      keepAliveTimeoutMs: 72_000,
    });
  });

  it('reads them, and refuses a head timeout longer than the request timeout', () => {
    expect(
      loadConfig({
        ...REQUIRED,
        HEADERS_TIMEOUT_MS: '500',
        REQUEST_TIMEOUT_MS: '900',
        KEEP_ALIVE_TIMEOUT_MS: '300',
      }),
    ).toMatchObject({ headersTimeoutMs: 500, requestTimeoutMs: 900, keepAliveTimeoutMs: 300 });
    expect(() => loadConfig({ ...REQUIRED, HEADERS_TIMEOUT_MS: '5000', REQUEST_TIMEOUT_MS: '1000' })).toThrow(
      ConfigError,
    );
  });
});
