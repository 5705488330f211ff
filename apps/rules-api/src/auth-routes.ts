/**
 * `GET /auth/me`: what the token in use may do, so a client (the console) learns its permissions
 * without trying a write. Any valid token may ask; it changes nothing and reads no database.
 */
import type { FastifyPluginAsync } from 'fastify';
import Type from 'typebox';
import { type AuthOptions, requireToken } from './auth.js';

const Credential = Type.Object({
  role: Type.Enum(['admin', 'read', 'anonymous'], {
    description:
      '`admin`: ADMIN_TOKEN; `read`: READ_TOKEN; `anonymous`: AUTH_DISABLED=true (no token needed)',
  }),
  canWrite: Type.Boolean({
    description: 'whether POST, PUT and DELETE on /rules are allowed with this token',
  }),
});

export const authRoutes: FastifyPluginAsync<{ auth: AuthOptions }> = async (app, { auth }) => {
  app.addHook('onRequest', requireToken(auth));
  app.get(
    '/auth/me',
    {
      schema: {
        summary: 'What the token in use may do',
        description: 'Answers which credential the bearer token is and whether it may change rules.',
        tags: ['auth'],
        response: {
          200: Credential,
          401: Type.Ref('Error', { description: 'Unauthorized: missing or wrong bearer token' }),
        },
      },
    },
    // the read token is the only one that may not write
    async (request) => ({ role: request.actor!, canWrite: request.actor !== 'read' }),
  );
};
