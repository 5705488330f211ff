/**
 * Every error the gateway itself answers with, in one table: the code a client or a log line can
 * grep for, the HTTP status, and the `error` phrase. Bodies follow the rules API's shape
 * `{ statusCode, error, message }` plus `code`.
 */
import { STATUS_CODES } from 'node:http';

export const GATEWAY_ERRORS = {
  /** the request-target cannot be normalised safely (SPEC §4); `message` names the reason */
  SLUICE_BAD_PATH: 400,
  /** the request body is larger than BODY_LIMIT_BYTES */
  SLUICE_BODY_TOO_LARGE: 413,
  /** no UPSTREAMS prefix takes the path */
  SLUICE_NO_UPSTREAM: 404,
  /** a prefix takes the path, but the method is not one the gateway proxies */
  SLUICE_METHOD_NOT_ALLOWED: 405,
  /** the rule set has not been loaded yet: nothing is proxied before the limits are known */
  SLUICE_RULES_NOT_LOADED: 503,
  /** STORE_FAILURE=closed and the store failed */
  SLUICE_STORE_UNAVAILABLE: 503,
  /** the upstream refused the connection, reset it, or could not be resolved */
  SLUICE_UPSTREAM_UNREACHABLE: 502,
  /** the upstream sent no response headers within UPSTREAM_TIMEOUT_MS */
  SLUICE_UPSTREAM_TIMEOUT: 504,
  /** the gateway is shutting down */
  SLUICE_SHUTTING_DOWN: 503,
  /** anything else: a bug, logged with its stack */
  SLUICE_INTERNAL: 500,
} as const;

export type GatewayErrorCode = keyof typeof GATEWAY_ERRORS;

export interface ErrorBody {
  statusCode: number;
  error: string;
  message: string;
  code: GatewayErrorCode;
}

export function errorBody(code: GatewayErrorCode, message: string): ErrorBody {
  const statusCode = GATEWAY_ERRORS[code];
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code };
}

/** An error thrown inside the gateway that maps to one row of the table. */
export class GatewayError extends Error {
  readonly statusCode: number;
  constructor(
    readonly code: GatewayErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.statusCode = GATEWAY_ERRORS[code];
  }
}
