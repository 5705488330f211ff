import { describe, expect, it } from 'vitest';
import { errorBody, GATEWAY_ERRORS, GatewayError, type GatewayErrorCode } from './errors.js';

describe('error codes', () => {
  it('every code is an error status with a reason phrase, and codes are namespaced', () => {
    for (const [code, status] of Object.entries(GATEWAY_ERRORS)) {
      expect(code).toMatch(/^SLUICE_[A-Z_]+$/);
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(600);
      const body = errorBody(code as GatewayErrorCode, 'm');
      expect(body).toEqual({
        statusCode: status,
        error: expect.stringMatching(/^[A-Z]/),
        message: 'm',
        code,
      });
    }
  });

  it('SPEC statuses: unsafe path 400, no upstream 404, unreachable 502, timeout 504, store closed 503', () => {
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
