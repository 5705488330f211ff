/**
 * Every error the rules API answers with, in one table. Each becomes
 * `{ statusCode, error, message, code }` through the error handler in `app.ts`.
 */
import createError from '@fastify/error';

export const ValidationError = createError<'SLUICE_VALIDATION', 400, [string]>(
  'SLUICE_VALIDATION',
  '%s',
  400,
);
export const InvalidCursorError = createError<'SLUICE_INVALID_CURSOR', 400, []>(
  'SLUICE_INVALID_CURSOR',
  'querystring/cursor is not a cursor this API returned (use nextCursor from the previous page)',
  400,
);
export const UnauthorizedError = createError<'SLUICE_UNAUTHORIZED', 401, [string]>(
  'SLUICE_UNAUTHORIZED',
  '%s',
  401,
);
export const ForbiddenError = createError<'SLUICE_FORBIDDEN', 403, []>(
  'SLUICE_FORBIDDEN',
  'the read-only token cannot change rules; use the admin token',
  403,
);
export const RuleNotFoundError = createError<'SLUICE_RULE_NOT_FOUND', 404, [string]>(
  'SLUICE_RULE_NOT_FOUND',
  'rule %s not found',
  404,
);
export const RuleNameTakenError = createError<'SLUICE_RULE_NAME_TAKEN', 409, [string]>(
  'SLUICE_RULE_NAME_TAKEN',
  'body/name: a rule named "%s" already exists',
  409,
);
export const VersionMismatchError = createError<'SLUICE_VERSION_MISMATCH', 412, [string, number, string]>(
  'SLUICE_VERSION_MISMATCH',
  'rule %s is at version %s, If-Match asked for %s',
  412,
);
/** A request body sent with a `Content-Encoding` (gzip, …): bodies are accepted as plain JSON only. */
export const UnsupportedEncodingError = createError<'SLUICE_UNSUPPORTED_ENCODING', 415, [string]>(
  'SLUICE_UNSUPPORTED_ENCODING',
  'Content-Encoding %s is not supported: send the JSON body uncompressed (identity)',
  415,
);
export const InternalError = createError<'SLUICE_INTERNAL', 500, []>(
  'SLUICE_INTERNAL',
  'internal server error',
  500,
);
export const DatabaseUnavailableError = createError<'SLUICE_DATABASE_UNAVAILABLE', 503, [string]>(
  'SLUICE_DATABASE_UNAVAILABLE',
  'the database is unavailable: %s',
  503,
);

/** SQLSTATE of a unique-constraint violation. */
export const PG_UNIQUE_VIOLATION = '23505';

/**
 * SQLSTATEs meaning "the database is not there or not taking work right now": class 08 (connection
 * exception), 53300 (too many connections), 57014 (statement timeout), 57P01-57P03 (shutting down).
 */
const UNAVAILABLE_SQLSTATE = /^(08...|53300|57014|57P0[1-3])$/;
const UNAVAILABLE_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
]);
/** node-postgres reports these as plain Errors without a code. */
const UNAVAILABLE_MESSAGE =
  /timeout exceeded when trying to connect|Connection terminated|Query read timeout|not queryable|Cannot use a pool after calling end|database did not answer/i;

/** Walks `cause` (drizzle wraps driver errors) and `errors` (AggregateError from dual-stack connects). */
function* causeChain(err: unknown, depth = 0): Generator<Record<string, unknown>> {
  if (depth > 8 || typeof err !== 'object' || err === null) return;
  yield err as Record<string, unknown>;
  const { cause, errors } = err as { cause?: unknown; errors?: unknown };
  yield* causeChain(cause, depth + 1);
  if (Array.isArray(errors)) for (const e of errors) yield* causeChain(e, depth + 1);
}

/** The Postgres SQLSTATE somewhere in an error's causes, if any. */
export function sqlState(err: unknown): string | undefined {
  for (const e of causeChain(err)) {
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
  }
  return undefined;
}

/** True when an error says the database cannot be reached or is not answering (→ 503). */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (const e of causeChain(err)) {
    if (e.code === 'SLUICE_DATABASE_UNAVAILABLE') return true;
    if (typeof e.code === 'string' && (UNAVAILABLE_SQLSTATE.test(e.code) || UNAVAILABLE_ERRNO.has(e.code))) {
      return true;
    }
    if (typeof e.message === 'string' && UNAVAILABLE_MESSAGE.test(e.message)) return true;
  }
  return false;
}

/** A short reason for a 503 message: the driver's words, without query text or parameters. */
export function unavailableReason(err: unknown): string {
  for (const e of causeChain(err)) {
    if (e.code === 'SLUICE_DATABASE_UNAVAILABLE') continue;
    if (typeof e.code === 'string' && (UNAVAILABLE_SQLSTATE.test(e.code) || UNAVAILABLE_ERRNO.has(e.code))) {
      return typeof e.message === 'string' && e.message ? e.message : e.code;
    }
    if (typeof e.message === 'string' && UNAVAILABLE_MESSAGE.test(e.message)) return e.message;
  }
  return 'no answer';
}
