import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  clientErrorResponse,
  errorBody,
  GATEWAY_ERRORS,
  GatewayError,
  type GatewayErrorCode,
} from './errors.js';

describe('error codes', () => {
  it('every code is an error status with a reason phrase, and codes are namespaced', () => {
    for (const [code, status] of Object.entries(GATEWAY_ERRORS)) {
      expect(code).toMatch(/^SLUICE_[A-Z_]+$/);
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(600);
      const body = errorBody(code as GatewayErrorCode, 'm');
      expect(body).toStrictEqual({
        statusCode: status,
        error: expect.stringMatching(/^[A-Z]/),
        message: 'm',
        code,
      });
    }
  });

  it('documented statuses: unsafe path 400, no upstream 404, unreachable 502, timeout 504, store closed 503', () => {
    expect(GATEWAY_ERRORS.SLUICE_BAD_PATH).toBe(400);
    expect(GATEWAY_ERRORS.SLUICE_NO_UPSTREAM).toBe(404);
    expect(GATEWAY_ERRORS.SLUICE_UPSTREAM_UNREACHABLE).toBe(502);
    expect(GATEWAY_ERRORS.SLUICE_UPSTREAM_TIMEOUT).toBe(504);
    expect(GATEWAY_ERRORS.SLUICE_STORE_UNAVAILABLE).toBe(503);
    expect(errorBody('SLUICE_UPSTREAM_TIMEOUT', 'x').error).toBe('Gateway Timeout');
  });

  it('a GatewayError carries its code and status', () => {
    const error = new GatewayError('SLUICE_BODY_TOO_LARGE', 'too big');
    expect(error.statusCode).toBe(413);
    expect(error.code).toBe('SLUICE_BODY_TOO_LARGE');
  });
});

describe('one table for every code', () => {
  /** Codes in the sources that are never an HTTP answer. */
  const NOT_ANSWERS = new Set([
    'SLUICE_CONFIG_INVALID' /* config.ts: printed at start, before any listener */,
  ]);
  // every source of the gateway, in every layer's folder
  const sourceDir = join(dirname(fileURLToPath(import.meta.url)), '..');
  const sources = (readdirSync(sourceDir, { recursive: true }) as string[])
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts'))
    .map((name) => {
      let text = readFileSync(join(sourceDir, name), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/\/\/.*$/gm, '');
      // the table itself does not count as emitting its codes
      if (name === join('http', 'errors.ts'))
        text = text.replace(/GATEWAY_ERRORS = \{[\s\S]*?\} as const;/, '');
      return { name, text };
    });
  const literals = (text: string) => [...text.matchAll(/['"`](SLUICE_[A-Z_]+)['"`]/g)].map((m) => m[1]!);

  it('every SLUICE_ code a gateway source names is in GATEWAY_ERRORS', () => {
    const unknown = sources.flatMap(({ name, text }) =>
      literals(text)
        .filter((code) => !(code in GATEWAY_ERRORS) && !NOT_ANSWERS.has(code))
        .map((code) => `${name}: ${code}`),
    );
    expect(sources.length).toBeGreaterThan(5);
    expect(unknown).toEqual([]);
  });

  it('every code in GATEWAY_ERRORS is emitted somewhere', () => {
    const used = new Set(sources.flatMap(({ text }) => literals(text)));
    expect(Object.keys(GATEWAY_ERRORS).filter((code) => !used.has(code))).toEqual([]);
  });

  it('answers on the bare socket carry a code too', () => {
    const timeout = clientErrorResponse({ code: 'ERR_HTTP_REQUEST_TIMEOUT' });
    expect(timeout).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(timeout).toContain('Connection: close');
    const body = timeout.slice(timeout.indexOf('\r\n\r\n') + 4);
    expect(JSON.parse(body)).toMatchObject({ statusCode: 408, code: 'SLUICE_REQUEST_TIMEOUT' });
    expect(timeout).toContain(`Content-Length: ${Buffer.byteLength(body)}\r\n`);
    expect(clientErrorResponse({ code: 'HPE_HEADER_OVERFLOW' })).toContain(
      '"code":"SLUICE_HEADERS_TOO_LARGE"',
    );
    expect(clientErrorResponse({ code: 'HPE_INVALID_METHOD' })).toContain('"code":"SLUICE_BAD_REQUEST"');
  });
});
