/**
 * Every error the gateway itself answers with, in one table: the code a client or a log line can
 * grep for, the HTTP status, and the `error` phrase. Bodies follow the rules API's shape
 * `{ statusCode, error, message }` plus `code`, and are built only by `errorBody` (or, for answers
 * written on the bare socket, `rawErrorResponse`). errors.test.ts checks that every `SLUICE_…`
 * code in the gateway's sources is in this table and that every row is emitted somewhere.
 *
 * Every body names the request it answers (`requestId`, the `X-Request-Id` of the response) where
 * there is one: Node's answers on the bare socket may come before a request could be read.
 *
 * The 429 of a denied request (`SLUICE_RATE_LIMITED`) has a body of its own: draft-11's
 * quota-exceeded problem (`application/problem+json`) around these members, built in answers.ts.
 */
import { STATUS_CODES } from 'node:http';
import { errorBody as sharedErrorBody } from '@sluice/shared';

export const GATEWAY_ERRORS = {
  /** the request-target cannot be normalised safely; `reason` names why (PATH_…) */
  SLUICE_BAD_PATH: 400,
  /** no Host on HTTP/1.1, two Host headers, userinfo, or not a host name; `reason` names why (HOST_…) */
  SLUICE_BAD_HOST: 400,
  /** TRUST_PROXY is set and the forwarded client address is not an IP address in canonical form */
  SLUICE_BAD_FORWARDED_FOR: 400,
  /** the request is not valid HTTP, or its framing is (Node's parser or Fastify refused it) */
  SLUICE_BAD_REQUEST: 400,
  /** the client did not send its request head within HEADERS_TIMEOUT_MS, or the whole request within REQUEST_TIMEOUT_MS */
  SLUICE_REQUEST_TIMEOUT: 408,
  /** the request head is larger than MAX_HEADER_BYTES */
  SLUICE_HEADERS_TOO_LARGE: 431,
  /** the request has more header lines than MAX_HEADER_COUNT (none is dropped silently) */
  SLUICE_TOO_MANY_HEADERS: 431,
  /** the request body is larger than BODY_LIMIT_BYTES */
  SLUICE_BODY_TOO_LARGE: 413,
  /** no UPSTREAMS prefix takes the path */
  SLUICE_NO_UPSTREAM: 404,
  /** a prefix takes the path, but the method is not one the gateway proxies; and every CONNECT (not a forward proxy) */
  SLUICE_METHOD_NOT_ALLOWED: 405,
  /** the rule set has not been loaded yet: nothing is proxied before the limits are known */
  SLUICE_RULES_NOT_LOADED: 503,
  /** a rule's limit denied the request (429: a quota-exceeded problem, answers.ts) */
  SLUICE_RATE_LIMITED: 429,
  /** STORE_FAILURE=closed and the store failed */
  SLUICE_STORE_UNAVAILABLE: 503,
  /** the upstream refused the connection, reset it, or could not be resolved */
  SLUICE_UPSTREAM_UNREACHABLE: 502,
  /** the upstream sent no response headers within UPSTREAM_TIMEOUT_MS */
  SLUICE_UPSTREAM_TIMEOUT: 504,
  /** the gateway is shutting down: in-flight requests finish, new ones are refused with `Connection: close` */
  SLUICE_SHUTTING_DOWN: 503,
  /** anything else: a bug, logged with its stack */
  SLUICE_INTERNAL: 500,
  /** admin port (`/offenders`, `/usage`): a query parameter missing or out of range */
  SLUICE_ADMIN_BAD_QUERY: 400,
  /** admin port (`/offenders`, `/usage`): GATEWAY_ADMIN_TOKEN is set and the request did not carry it */
  SLUICE_ADMIN_UNAUTHORIZED: 401,
  /** admin port (`/offenders`, `/usage`): no enabled rule of that name in the gateway's rule set */
  SLUICE_RULE_NOT_FOUND: 404,
} as const;

export type GatewayErrorCode = keyof typeof GATEWAY_ERRORS;

export interface ErrorBody {
  statusCode: number;
  error: string;
  message: string;
  code: GatewayErrorCode;
  /** why, more precisely (SLUICE_BAD_PATH, SLUICE_BAD_HOST) */
  reason?: string;
  /** the request's id (its `X-Request-Id`) */
  requestId?: string;
}

/** Extra fields some errors carry. */
export type ErrorDetails = Pick<ErrorBody, 'reason' | 'requestId'>;

/** The body of one row of the table, built the same way as the rules API's (shared `errorBody`). */
export function errorBody(code: GatewayErrorCode, message: string, details?: ErrorDetails): ErrorBody {
  const body = sharedErrorBody(GATEWAY_ERRORS[code], code, message) as ErrorBody;
  return details === undefined ? body : { ...body, ...details };
}

/**
 * A whole HTTP/1.1 error response, for the answers Node asks for on the bare socket (a request it
 * could not parse, or that timed out) where there is no reply object; `requestId` when a request was
 * read (its body is what failed). Closes the connection.
 */
export function rawErrorResponse(code: GatewayErrorCode, message: string, requestId?: string): string {
  const body = JSON.stringify(errorBody(code, message, requestId === undefined ? undefined : { requestId }));
  const status = GATEWAY_ERRORS[code];
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    (requestId === undefined ? '' : `X-Request-Id: ${requestId}\r\n`) +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

/** The error answer for a socket-level client error Node reports (`clientError`). */
export function clientErrorResponse(error: { code?: string }, requestId?: string): string {
  switch (error.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return rawErrorResponse('SLUICE_REQUEST_TIMEOUT', 'the request was not received in time', requestId);
    case 'HPE_HEADER_OVERFLOW':
      return rawErrorResponse('SLUICE_HEADERS_TOO_LARGE', 'the request head is too large', requestId);
    default:
      return rawErrorResponse('SLUICE_BAD_REQUEST', 'the request is not valid HTTP/1.1', requestId);
  }
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
