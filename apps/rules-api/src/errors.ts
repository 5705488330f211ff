/**
 * Every error the rules API answers with, in one table (`RULES_API_ERRORS`: code → HTTP status).
 * Each becomes `{ statusCode, error, message, code }` through `errorBody` (the shape both apps share),
 * built by `errorResponse` in the error handler of `app.ts`.
 */
import createError from '@fastify/error';
import { type ErrorBody, errorBody } from '@sluice/shared';

export const RULES_API_ERRORS = {
  /** a body, query or parameter that fails its schema; the message names the field */
  SLUICE_VALIDATION: 400,
  /** `?cursor=` that this API did not hand out */
  SLUICE_INVALID_CURSOR: 400,
  /** `If-Match:` sent with an empty value: refused rather than taken as no condition (an unconditional write) */
  SLUICE_IF_MATCH_EMPTY: 400,
  /** a request the framework could not read (broken JSON, bad Content-Length…) */
  SLUICE_BAD_REQUEST: 400,
  /** no bearer token, or a wrong one */
  SLUICE_UNAUTHORIZED: 401,
  /** the read-only token on a write */
  SLUICE_FORBIDDEN: 403,
  SLUICE_RULE_NOT_FOUND: 404,
  /** no route for this method and path */
  SLUICE_ROUTE_NOT_FOUND: 404,
  SLUICE_RULE_NAME_TAKEN: 409,
  /** `If-Match` names another version */
  SLUICE_VERSION_MISMATCH: 412,
  /** the body is larger than BODY_LIMIT_BYTES */
  SLUICE_BODY_TOO_LARGE: 413,
  /** a body that is not `application/json` */
  SLUICE_UNSUPPORTED_MEDIA_TYPE: 415,
  /** a body sent with a `Content-Encoding` other than identity (gzip, …) */
  SLUICE_UNSUPPORTED_ENCODING: 415,
  /** anything else: a bug, logged with its stack */
  SLUICE_INTERNAL: 500,
  /** the database does not answer, or refuses work for now */
  SLUICE_DATABASE_UNAVAILABLE: 503,
  /** top offenders: no REDIS_URL / REDIS_CLUSTER_NODES is configured, or that Redis does not answer */
  SLUICE_ANALYTICS_UNAVAILABLE: 503,
} as const;

export type RulesApiErrorCode = keyof typeof RULES_API_ERRORS;

/** The body for one row of the table. */
export function rulesApiErrorBody(code: RulesApiErrorCode, message: string): ErrorBody {
  return errorBody(RULES_API_ERRORS[code], code, message);
}

function isTableCode(code: unknown): code is RulesApiErrorCode {
  return typeof code === 'string' && Object.hasOwn(RULES_API_ERRORS, code);
}

/** Client errors the framework raises with its own codes (FST_ERR_…), by status. */
const FRAMEWORK_CODES: Readonly<Record<number, RulesApiErrorCode>> = {
  413: 'SLUICE_BODY_TOO_LARGE',
  415: 'SLUICE_UNSUPPORTED_MEDIA_TYPE',
};

/**
 * The answer to any error thrown while serving a request, always with a code of the table: ours keep
 * theirs; schema failures are `SLUICE_VALIDATION`; an unreachable database is 503; the framework's
 * other client errors keep their message under a table code; anything else is a 500 that tells the
 * client nothing more.
 */
export function errorResponse(err: unknown): ErrorBody {
  const e = (typeof err === 'object' && err !== null ? err : {}) as {
    code?: unknown;
    statusCode?: unknown;
    message?: unknown;
    validation?: unknown;
  };
  const message = typeof e.message === 'string' ? e.message : '';
  if (e.validation) return rulesApiErrorBody('SLUICE_VALIDATION', message);
  if (isTableCode(e.code) && e.code !== 'SLUICE_INTERNAL') return rulesApiErrorBody(e.code, message);
  if (isDatabaseUnavailable(err)) {
    return rulesApiErrorBody(
      'SLUICE_DATABASE_UNAVAILABLE',
      new DatabaseUnavailableError(unavailableReason(err)).message,
    );
  }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500;
  if (status >= 400 && status < 500) {
    return rulesApiErrorBody(FRAMEWORK_CODES[status] ?? 'SLUICE_BAD_REQUEST', message);
  }
  return rulesApiErrorBody('SLUICE_INTERNAL', 'internal server error');
}

export const ValidationError = createError<'SLUICE_VALIDATION', 400, [string]>(
  'SLUICE_VALIDATION',
  '%s',
  RULES_API_ERRORS.SLUICE_VALIDATION,
);
export const InvalidCursorError = createError<'SLUICE_INVALID_CURSOR', 400, []>(
  'SLUICE_INVALID_CURSOR',
  'querystring/cursor is not a cursor this API returned (use nextCursor from the previous page)',
  RULES_API_ERRORS.SLUICE_INVALID_CURSOR,
);
export const EmptyIfMatchError = createError<'SLUICE_IF_MATCH_EMPTY', 400, []>(
  'SLUICE_IF_MATCH_EMPTY',
  'headers/if-match is empty: send the version to change, e.g. If-Match: "3", or * for any version, or leave the header out to change whatever version is current',
  RULES_API_ERRORS.SLUICE_IF_MATCH_EMPTY,
);
export const UnauthorizedError = createError<'SLUICE_UNAUTHORIZED', 401, [string]>(
  'SLUICE_UNAUTHORIZED',
  '%s',
  RULES_API_ERRORS.SLUICE_UNAUTHORIZED,
);
export const ForbiddenError = createError<'SLUICE_FORBIDDEN', 403, []>(
  'SLUICE_FORBIDDEN',
  'the read-only token cannot change rules; use the admin token',
  RULES_API_ERRORS.SLUICE_FORBIDDEN,
);
export const RuleNotFoundError = createError<'SLUICE_RULE_NOT_FOUND', 404, [string]>(
  'SLUICE_RULE_NOT_FOUND',
  'rule %s not found',
  RULES_API_ERRORS.SLUICE_RULE_NOT_FOUND,
);
export const RuleNameTakenError = createError<'SLUICE_RULE_NAME_TAKEN', 409, [string]>(
  'SLUICE_RULE_NAME_TAKEN',
  'body/name: a rule named "%s" already exists',
  RULES_API_ERRORS.SLUICE_RULE_NAME_TAKEN,
);
export const VersionMismatchError = createError<'SLUICE_VERSION_MISMATCH', 412, [string, number, string]>(
  'SLUICE_VERSION_MISMATCH',
  'rule %s is at version %s, If-Match asked for %s',
  RULES_API_ERRORS.SLUICE_VERSION_MISMATCH,
);
/** A request body sent with a `Content-Encoding` (gzip, …): bodies are accepted as plain JSON only. */
export const UnsupportedEncodingError = createError<'SLUICE_UNSUPPORTED_ENCODING', 415, [string]>(
  'SLUICE_UNSUPPORTED_ENCODING',
  'Content-Encoding %s is not supported: send the JSON body uncompressed (identity)',
  RULES_API_ERRORS.SLUICE_UNSUPPORTED_ENCODING,
);
export const InternalError = createError<'SLUICE_INTERNAL', 500, []>(
  'SLUICE_INTERNAL',
  'internal server error',
  RULES_API_ERRORS.SLUICE_INTERNAL,
);
export const DatabaseUnavailableError = createError<'SLUICE_DATABASE_UNAVAILABLE', 503, [string]>(
  'SLUICE_DATABASE_UNAVAILABLE',
  'the database is unavailable: %s',
  RULES_API_ERRORS.SLUICE_DATABASE_UNAVAILABLE,
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
