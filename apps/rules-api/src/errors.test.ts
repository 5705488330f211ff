import { describe, expect, it } from 'vitest';
import {
  DatabaseUnavailableError,
  ForbiddenError,
  InternalError,
  InvalidCursorError,
  isDatabaseUnavailable,
  RuleNameTakenError,
  RuleNotFoundError,
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
