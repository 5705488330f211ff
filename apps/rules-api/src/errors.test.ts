import { STATUS_CODES } from 'node:http';
import { describe, expect, it } from 'vitest';
import {
  DatabaseUnavailableError,
  errorResponse,
  ForbiddenError,
  InternalError,
  InvalidCursorError,
  isDatabaseUnavailable,
  RULES_API_ERRORS,
  RuleNameTakenError,
  RuleNotFoundError,
  rulesApiErrorBody,
  sqlState,
  UnauthorizedError,
  unavailableReason,
  ValidationError,
  VersionMismatchError,
} from './errors.js';

describe('error table', () => {
  it.each([
    [new ValidationError('body/name must be string'), 'SLUICE_VALIDATION', 400, 'body/name must be string'],
    [
      new InvalidCursorError(),
      'SLUICE_INVALID_CURSOR',
      400,
      'querystring/cursor is not a cursor this API returned (use nextCursor from the previous page)',
    ],
    [new UnauthorizedError('invalid bearer token'), 'SLUICE_UNAUTHORIZED', 401, 'invalid bearer token'],
    [
      new ForbiddenError(),
      'SLUICE_FORBIDDEN',
      403,
      'the read-only token cannot change rules; use the admin token',
    ],
    [new RuleNotFoundError('abc'), 'SLUICE_RULE_NOT_FOUND', 404, 'rule abc not found'],
    [
      new RuleNameTakenError('orders'),
      'SLUICE_RULE_NAME_TAKEN',
      409,
      'body/name: a rule named "orders" already exists',
    ],
    [
      new VersionMismatchError('abc', 3, '2'),
      'SLUICE_VERSION_MISMATCH',
      412,
      'rule abc is at version 3, If-Match asked for 2',
    ],
    [new InternalError(), 'SLUICE_INTERNAL', 500, 'internal server error'],
    [
      new DatabaseUnavailableError('connect ECONNREFUSED'),
      'SLUICE_DATABASE_UNAVAILABLE',
      503,
      'the database is unavailable: connect ECONNREFUSED',
    ],
  ])('%s', (err, code, statusCode, message) => {
    expect(err).toBeInstanceOf(Error);
    expect(err.code).toBe(code);
    expect(err.statusCode).toBe(statusCode);
    expect(err.message).toBe(message);
    expect(RULES_API_ERRORS[err.code]).toBe(statusCode);
    expect(errorResponse(err)).toEqual({
      statusCode,
      error: STATUS_CODES[statusCode],
      message,
      code,
    });
  });

  it.each(Object.entries(RULES_API_ERRORS))(
    '%s maps to %i and a body of the shared shape',
    (code, status) => {
      expect(STATUS_CODES[status]).toBeDefined();
      expect(status >= 400 && status < 600).toBe(true);
      expect(rulesApiErrorBody(code as keyof typeof RULES_API_ERRORS, 'what went wrong')).toEqual({
        statusCode: status,
        error: STATUS_CODES[status],
        message: 'what went wrong',
        code,
      });
    },
  );
});

describe('errorResponse', () => {
  const fastifyError = (code: string, statusCode: number, message: string) =>
    Object.assign(new Error(message), { code, statusCode });

  it('answers a schema failure with SLUICE_VALIDATION and its message', () => {
    const err = Object.assign(new Error('body/name must be string'), {
      code: 'FST_ERR_VALIDATION',
      statusCode: 400,
      validation: [{}],
    });
    expect(errorResponse(err)).toMatchObject({
      statusCode: 400,
      code: 'SLUICE_VALIDATION',
      message: 'body/name must be string',
    });
  });

  it.each([
    ['FST_ERR_CTP_BODY_TOO_LARGE', 413, 'Request body is too large', 'SLUICE_BODY_TOO_LARGE'],
    ['FST_ERR_CTP_INVALID_MEDIA_TYPE', 415, 'Unsupported Media Type', 'SLUICE_UNSUPPORTED_MEDIA_TYPE'],
    ['FST_ERR_CTP_INVALID_JSON_BODY', 400, 'Body is not valid JSON', 'SLUICE_BAD_REQUEST'],
    ['FST_ERR_CTP_INVALID_CONTENT_LENGTH', 400, 'Request body size did not match', 'SLUICE_BAD_REQUEST'],
    ['FST_ERR_SOMETHING_NEW', 422, 'odd', 'SLUICE_BAD_REQUEST'],
  ])('answers the framework error %s with a code of the table', (fstCode, status, message, code) => {
    const body = errorResponse(fastifyError(fstCode, status, message));
    expect(body).toEqual({
      statusCode: RULES_API_ERRORS[code as keyof typeof RULES_API_ERRORS],
      error: STATUS_CODES[RULES_API_ERRORS[code as keyof typeof RULES_API_ERRORS]],
      message,
      code,
    });
  });

  it('answers an unreachable database with 503 and the driver reason, without the query', () => {
    const err = Object.assign(new Error('Failed query: select secret\nparams: '), {
      cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    });
    expect(errorResponse(err)).toEqual({
      statusCode: 503,
      error: 'Service Unavailable',
      message: 'the database is unavailable: connect ECONNREFUSED 127.0.0.1:5432',
      code: 'SLUICE_DATABASE_UNAVAILABLE',
    });
  });

  it.each([
    ['a programming error', new TypeError('cannot read x of undefined')],
    [
      'an error claiming SLUICE_INTERNAL',
      Object.assign(new Error('secret detail'), { code: 'SLUICE_INTERNAL' }),
    ],
    ['a 5xx from elsewhere', Object.assign(new Error('upstream detail'), { statusCode: 502 })],
    ['not an error', 'boom'],
  ])('answers %s with a bare 500', (_, err) => {
    expect(errorResponse(err)).toEqual({
      statusCode: 500,
      error: 'Internal Server Error',
      message: 'internal server error',
      code: 'SLUICE_INTERNAL',
    });
  });
});

describe('isDatabaseUnavailable', () => {
  const pgError = (code: string, message = 'pg says no') => Object.assign(new Error(message), { code });
  const wrapped = (cause: unknown) => Object.assign(new Error('Failed query: select 1\nparams: '), { cause });

  it.each([
    [
      'refused connection',
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    ],
    ['dual-stack refusal', new AggregateError([Object.assign(new Error('x'), { code: 'ECONNREFUSED' })])],
    ['pool connect timeout', new Error('timeout exceeded when trying to connect')],
    ['dropped connection', new Error('Connection terminated unexpectedly')],
    ['silent server', new Error('Query read timeout')],
    ['admin shutdown 57P01', pgError('57P01')],
    ['statement timeout 57014', pgError('57014')],
    ['too many connections 53300', pgError('53300')],
    ['connection failure 08006', pgError('08006')],
    ['wrapped by drizzle', wrapped(pgError('57P01'))],
    ['our own deadline', new DatabaseUnavailableError('ping')],
  ])('yes: %s', (_, err) => {
    expect(isDatabaseUnavailable(err)).toBe(true);
  });

  it.each([
    ['unique violation', wrapped(pgError('23505'))],
    ['syntax error', pgError('42601')],
    ['programming error', new TypeError('x is undefined')],
    ['not an error', 'boom'],
  ])('no: %s', (_, err) => {
    expect(isDatabaseUnavailable(err)).toBe(false);
  });

  it('finds the SQLSTATE behind a wrapper and words the reason without the query', () => {
    expect(sqlState(wrapped(pgError('23505')))).toBe('23505');
    expect(
      unavailableReason(wrapped(pgError('57P01', 'terminating connection due to administrator command'))),
    ).toBe('terminating connection due to administrator command');
  });
});
