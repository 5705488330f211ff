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

/** A reply of the proxy listener, or the one @fastify/http-proxy hands its error hook (typed for any server). */
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
