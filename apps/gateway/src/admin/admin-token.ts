/**
 * GATEWAY_ADMIN_TOKEN (docs/gateway.md, "Admin port"): the admin answers that name clients require it
 * as a bearer token; health, readiness and metrics stay open for probes and Prometheus.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { bearerToken } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../http/errors.js';

/** Equal-length digests, so the comparison takes the same time whatever the token sent. */
function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export function requireAdminToken(admin: FastifyInstance, paths: readonly string[], token: string): void {
  const expected = digest(token);
  admin.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?', 1)[0]!;
    if (!paths.includes(path)) return;
    const sent = bearerToken(request.headers.authorization);
    if (sent !== undefined && timingSafeEqual(digest(sent), expected)) return;
    reply
      .code(401)
      .header('www-authenticate', 'Bearer realm="sluice-admin"')
      .send(errorBody('SLUICE_ADMIN_UNAUTHORIZED', 'this answer needs the GATEWAY_ADMIN_TOKEN bearer token'));
    return reply;
  });
}
