import { describe, expect, it } from 'vitest';
import { errorBody } from './error-body.js';

describe('errorBody', () => {
  it('carries the status, its reason phrase, the message and the code, in that order', () => {
    const body = errorBody(429, 'SLUICE_RATE_LIMITED', 'slow down');
    expect(body).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'slow down',
      code: 'SLUICE_RATE_LIMITED',
    });
    expect(Object.keys(body)).toEqual(['statusCode', 'error', 'message', 'code']);
  });

  it.each([
    [400, 'Bad Request'],
    [404, 'Not Found'],
    [503, 'Service Unavailable'],
  ])('%i is %s', (status, phrase) => {
    expect(errorBody(status, 'X', 'm').error).toBe(phrase);
  });

  it('says Error for a status without a reason phrase', () => {
    expect(errorBody(599, 'X', 'm').error).toBe('Error');
  });
});
