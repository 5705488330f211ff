/**
 * Bearer-token auth (docs/rules-api.md, Authentication): `ADMIN_TOKEN` reads and writes, `READ_TOKEN` only reads (GET/HEAD).
 * Tokens are compared as SHA-256 digests with `timingSafeEqual`, so neither the content nor the
 * length of a configured token leaks through response timing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { ForbiddenError, UnauthorizedError } from './errors.js';

/** Who made a request; written to history as the change's `actor`. Never the token itself. */
export type Actor = 'admin' | 'read' | 'anonymous';

declare module 'fastify' {
  interface FastifyRequest {
    actor: Actor | undefined;
  }
}

export interface AuthOptions {
  adminToken: string | undefined;
  readToken: string | undefined;
  authDisabled: boolean;
}

export const WWW_AUTHENTICATE = 'Bearer realm="sluice-rules-api"';

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

/** `Authorization: Bearer <token>` (scheme case-insensitive, RFC 9110 §11.1); undefined otherwise. */
export function bearerToken(header: string | undefined): string | undefined {
  const m = header === undefined ? null : /^Bearer[ \t]+([^ \t]+)[ \t]*$/i.exec(header);
  return m?.[1];
}

/** Methods the read-only token may use. */
const READ_METHODS = new Set(['GET', 'HEAD']);

/**
 * An `onRequest` hook for the protected routes: sets `request.actor` or answers 401/403.
 * `access: 'read'` marks routes that only read whatever their method (`POST /rules/explain`).
 */
export function requireToken(
  options: AuthOptions,
  access: 'by-method' | 'read' = 'by-method',
): onRequestAsyncHookHandler {
  const admin = options.adminToken === undefined ? undefined : digest(options.adminToken);
  const read = options.readToken === undefined ? undefined : digest(options.readToken);

  return async function checkToken(request: FastifyRequest, reply: FastifyReply) {
    if (options.authDisabled) {
      request.actor = 'anonymous';
      return;
    }
    const token = bearerToken(request.headers.authorization);
    if (token === undefined) {
      reply.header('www-authenticate', WWW_AUTHENTICATE);
      throw new UnauthorizedError('missing bearer token: send Authorization: Bearer <token>');
    }
    const given = digest(token);
    // Both comparisons always run, so timing does not tell which token (if any) matched.
    const isAdmin = admin !== undefined && timingSafeEqual(given, admin);
    const isRead = read !== undefined && timingSafeEqual(given, read);
    if (!isAdmin && !isRead) {
      reply.header('www-authenticate', `${WWW_AUTHENTICATE}, error="invalid_token"`);
      throw new UnauthorizedError('invalid bearer token');
    }
    if (!isAdmin && access !== 'read' && !READ_METHODS.has(request.method)) throw new ForbiddenError();
    request.actor = isAdmin ? 'admin' : 'read';
  };
}
