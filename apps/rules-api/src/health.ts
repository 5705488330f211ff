/** `/healthz` (the process runs) and `/readyz` (the database answers), both without auth. */
import type { FastifyPluginAsync } from 'fastify';
import Type from 'typebox';
import type { Database } from './db/client.js';
import { rulesApiErrorBody, unavailableReason } from './errors.js';

export interface HealthRoutesOptions {
  /** only its `ping` is used (app.ts passes one that is timed for /metrics) */
  database: Pick<Database, 'ping'>;
  /** how long `/readyz` waits for `SELECT 1`, ms */
  timeoutMs: number;
}

const Status = Type.Object({ status: Type.String() });

/**
 * No input of these routes can be wrong, but a request the HTTP server cannot parse (a broken request
 * line or header) is answered 400 before any route runs; documented so clients expect it.
 */
const Unreadable = Type.Ref('Error', {
  description: 'Bad Request: the HTTP request could not be parsed (answered before the route runs)',
});

export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, { database, timeoutMs }) => {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness',
        tags: ['health'],
        security: [],
        response: { 200: Status, 400: Unreadable },
      },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: 200 when the database answers within the timeout, else 503',
        tags: ['health'],
        security: [],
        response: {
          200: Status,
          400: Unreadable,
          503: Type.Ref('Error', { description: 'the database does not answer' }),
        },
      },
    },
    async (request, reply) => {
      try {
        await database.ping(timeoutMs);
        return { status: 'ok' };
      } catch (err) {
        request.log.warn({ err }, 'readiness check failed');
        return reply
          .code(503)
          .send(
            rulesApiErrorBody(
              'SLUICE_DATABASE_UNAVAILABLE',
              `the database is unavailable: ${unavailableReason(err)}`,
            ),
          );
      }
    },
  );
};
