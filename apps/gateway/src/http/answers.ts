/**
 * The gateway's own answers (everything it says without an upstream), built one way each: refusals
 * from the error table (errors.ts), the one 413, and the connection hygiene they share.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyReply } from 'fastify';
import { type ErrorDetails, errorBody, GATEWAY_ERRORS, type GatewayErrorCode } from './errors.js';

/** Answers a refused request; one that may still be sending a body gets its connection closed. */
export function refuse(
  reply: FastifyReply,
  code: GatewayErrorCode,
  message: string,
  details?: Omit<ErrorDetails, 'requestId'>,
): void {
  closeIfBodyPending(reply.request.raw, reply);
  reply
    .code(GATEWAY_ERRORS[code])
    .send(errorBody(code, message, { ...details, requestId: reply.request.id }));
}

/** What a 413 needs of a reply (the proxy listener's). */
interface AnyReply {
  readonly request: { readonly id: string };
  header(name: string, value: string): unknown;
  code(statusCode: number): { send(body: unknown): unknown };
}

/** The message of every 413, whichever step found the body too large. */
export function bodyTooLargeMessage(bodyLimitBytes: number): string {
  return `request body is larger than ${bodyLimitBytes} bytes`;
}

/**
 * 413: the body (declared, or counted while it streams) is over BODY_LIMIT_BYTES. The rest of it is
 * never read, so the connection closes after the answer.
 */
export function refuseBodyTooLarge(reply: AnyReply, bodyLimitBytes: number): void {
  reply.header('connection', 'close');
  reply.code(413).send(
    errorBody('SLUICE_BODY_TOO_LARGE', bodyTooLargeMessage(bodyLimitBytes), {
      requestId: reply.request.id,
    }),
  );
}

/**
 * A refused request may still be sending its body. It is never read: the connection is closed after
 * the answer instead of being kept alive behind a body nobody wants.
 */
export function closeIfBodyPending(raw: IncomingMessage, reply: FastifyReply): void {
  if (raw.complete) return;
  const headers = raw.headers;
  if (headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0') {
    reply.header('connection', 'close');
  }
}

/** draft-11's problem type for a request beyond its quota (RFC 9457 problem details). */
export const QUOTA_EXCEEDED_TYPE = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
/** The media type of a 429's body (RFC 9457). */
export const PROBLEM_JSON_TYPE = 'application/problem+json; charset=utf-8';

/**
 * The constant parts of one rule's 429 body, built once per rule: the problem members up to
 * `violated-policies`, each denying limit's rest up to `retryAfter`, and each limit's policy name as
 * a JSON string (the name its `RateLimit-Policy` item carries, without the sf-string quotes).
 */
export interface QuotaExceededParts {
  readonly head: string;
  /** per limit, when it is the first denying one: `],…,"retryAfter":` (a v2 body names the limit) */
  readonly tails: readonly string[];
  readonly policyNames: readonly string[];
}

export function quotaExceededParts(rule: {
  readonly name: string;
  readonly format: 1 | 2;
  readonly limits: readonly { readonly name: string }[];
}): QuotaExceededParts {
  const name = rule.name;
  const message = JSON.stringify(`rate limit of rule "${name}" exceeded`);
  // the draft's problem members first, then the body Sluice has always sent (clients read both)
  const head =
    `{"type":${JSON.stringify(QUOTA_EXCEEDED_TYPE)},` +
    '"title":"Request cannot be satisfied as assigned quota has been exceeded",' +
    `"status":429,"detail":${message},"violated-policies":[`;
  const rest = `],"code":"SLUICE_RATE_LIMITED","statusCode":429,"error":"Too Many Requests","message":${message},"rule":${JSON.stringify(name)},`;
  return {
    head,
    tails: rule.limits.map((limit) =>
      rule.format === 1
        ? `${rest}"retryAfter":`
        : `${rest}"limit":${JSON.stringify(limit.name)},"retryAfter":`,
    ),
    policyNames: rule.limits.map((limit) =>
      JSON.stringify(limit.name === '' ? name : `${name}.${limit.name}`),
    ),
  };
}

/**
 * A 429's body: draft-11's quota-exceeded problem naming every limit that denied the request, with
 * the members of Sluice's own error body (`code`, `statusCode`, `error`, `message`, `rule`, `limit`,
 * `retryAfter`, `requestId`).
 */
export function quotaExceededBody(
  parts: QuotaExceededParts,
  decision: { readonly limits: readonly { readonly allowed: boolean }[]; readonly deniedIndex: number },
  retryAfterSec: number,
  requestId: string,
): string {
  let violated = '';
  for (let i = 0; i < decision.limits.length; i++) {
    if (decision.limits[i]!.allowed) continue;
    violated += violated === '' ? parts.policyNames[i] : `,${parts.policyNames[i]}`;
  }
  const tail = parts.tails[decision.deniedIndex] ?? parts.tails[0];
  return `${parts.head}${violated}${tail}${retryAfterSec},"requestId":${JSON.stringify(requestId)}}`;
}
