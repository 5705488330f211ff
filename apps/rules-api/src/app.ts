/**
 * Builds the rules API as a Fastify instance without listening: `server.ts` boots it, tests call
 * `inject()` or listen on port 0.
 */
import { randomUUID } from 'node:crypto';
import AjvCompiler from '@fastify/ajv-compiler';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { SecretClientKeys, TokenVerifier } from '@sluice/shared';
import { openAnalyticsRedis } from '@sluice/shared/redis';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { authRoutes } from './auth-routes.js';
import type { Config } from './config.js';
import { consoleRoutes } from './console/routes.js';
import { type Database, openDatabase } from './db/client.js';
import { migrateDatabase } from './db/migrate.js';
import { errorResponse, rulesApiErrorBody } from './errors.js';
import { healthRoutes } from './health.js';
import { registerJsonBodyParser } from './http/json-body.js';
import { formatSchemaErrors } from './http/validation-errors.js';
import { RulesApiMetrics } from './metrics.js';
import { offendersRoutes } from './offenders/routes.js';
import { openapiOptions } from './openapi.js';
import { explainRoutes } from './rules/explain.js';
import { RulesRepository } from './rules/repository.js';
import { rulesRoutes } from './rules/routes.js';
import { SHARED_SCHEMAS } from './rules/schemas.js';
import { SnapshotCache } from './rules/snapshot-cache.js';

export const VERSION = '0.1.0';

export interface AppDeps {
  /** an open database to use (the caller closes it); default: opened from `config` and closed with the app */
  database?: Database;
  /** skip applying migrations at build (tests of a database that is down) */
  skipMigrations?: boolean;
  /** overrides Fastify's logger option (tests pass a stream to read the logs) */
  logger?: FastifyServerOptions['logger'];
}

declare module 'fastify' {
  interface FastifyInstance {
    database: Database;
    repository: RulesRepository;
  }
}

/**
 * Bodies are validated strictly (unknown fields rejected, no type coercion); querystring, params and
 * headers keep Fastify's defaults (`?limit=5` becomes the number 5, `?enabled=true` the boolean).
 * Fastify's default `removeAdditional: true` would silently drop an unknown body field.
 */
const STRICT_BODY_OPTIONS = {
  coerceTypes: false,
  removeAdditional: false,
  useDefaults: false,
  verbose: true,
};

function validatorFactory(): NonNullable<
  NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']
>['buildValidator'] {
  const pool = AjvCompiler();
  return (externalSchemas, ajvOptions) => {
    const lenient = pool(externalSchemas, ajvOptions);
    const strict = pool(externalSchemas, {
      ...ajvOptions,
      customOptions: { ...ajvOptions?.customOptions, ...STRICT_BODY_OPTIONS },
    } as Parameters<typeof pool>[1]);
    return (route) => (route.httpPart === 'body' ? strict(route) : lenient(route));
  };
}

export async function buildApp(config: Config, deps: AppDeps = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: deps.logger ?? {
      level: config.logLevel,
      // Fastify's request serializer logs no headers; this is the guard if one ever does.
      redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
    },
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    bodyLimit: config.bodyLimitBytes,
    schemaController: { compilersFactory: { buildValidator: validatorFactory() } },
    schemaErrorFormatter: formatSchemaErrors,
    // Keep-alive sockets would otherwise hold `close()` open; in-flight requests still finish.
    forceCloseConnections: 'idle',
  });

  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);

  const ownsDatabase = deps.database === undefined;
  const database =
    deps.database ??
    (await openDatabase({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      timeoutMs: config.dbTimeoutMs,
      onPoolError: (err) => app.log.warn({ err }, 'idle database connection failed'),
    }));
  try {
    if (!deps.skipMigrations) {
      await migrateDatabase(database, {
        migrationsDir: config.migrationsDir,
        connectTimeoutMs: Math.max(config.dbTimeoutMs, 5_000),
      });
    }
  } catch (err) {
    if (ownsDatabase) await database.close().catch(() => undefined);
    throw err;
  }
  if (ownsDatabase) app.addHook('onClose', async () => database.close());

  const repository = new RulesRepository(database);
  const snapshots = new SnapshotCache(repository, config.snapshotCacheMs);
  const metrics = new RulesApiMetrics({ readRulesetVersion: () => snapshots.currentVersion() });
  metrics.instrument(repository);
  // before any route: each route's documented statuses start at 0
  metrics.observe(app);
  app.decorate('database', database);
  app.decorate('repository', repository);
  app.decorateRequest('actor', undefined);

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  // Bodies are JSON only (others: 415), uncompressed, and free of values Postgres or JavaScript
  // objects cannot take safely (NUL, lone surrogates, `__proto__`/`constructor` keys): 400 naming the field.
  registerJsonBodyParser(app);

  app.setErrorHandler((err: FastifyError, request, reply) => {
    const body = errorResponse(err);
    if (body.code === 'SLUICE_INTERNAL') request.log.error({ err }, 'request failed');
    else if (body.code === 'SLUICE_DATABASE_UNAVAILABLE') request.log.warn({ err }, 'database unavailable');
    else if (err.code?.startsWith('FST_ERR_CTP')) request.log.info({ err }, 'bad request body');
    // RFC 9110 §15.5.16: a 415 for a content coding lists the codings the server accepts.
    if (body.code === 'SLUICE_UNSUPPORTED_ENCODING') reply.header('accept-encoding', 'identity');
    return reply.code(body.statusCode).send(body);
  });

  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send(
        rulesApiErrorBody(
          'SLUICE_ROUTE_NOT_FOUND',
          `route ${request.method} ${request.url.split('?')[0]} not found`,
        ),
      ),
  );

  await app.register(swagger, openapiOptions(VERSION));
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    const { contentType, body } = await metrics.exposition();
    return reply.header('content-type', contentType).send(body);
  });

  const timedPing = (timeoutMs: number) => metrics.timed('ping', () => database.ping(timeoutMs));
  await app.register(healthRoutes, { database: { ping: timedPing }, timeoutMs: config.dbTimeoutMs });
  const auth = {
    adminToken: config.adminToken,
    readToken: config.readToken,
    authDisabled: config.authDisabled,
  };
  await app.register(authRoutes, { auth });
  await app.register(rulesRoutes, { repository, snapshots, auth });
  if (config.clientKeySecret === undefined) {
    app.log.warn(
      "CLIENT_KEY_SECRET is not set: explain keys credential headers by their plain SHA-256 (set the gateways' CLIENT_KEY_SECRET here too)",
    );
  }
  await app.register(explainRoutes, {
    snapshots,
    auth,
    verifier: config.jwt === undefined ? undefined : new TokenVerifier(config.jwt),
    secretKeys: new SecretClientKeys(config.clientKeySecret),
  });
  await app.register(consoleRoutes);
  const analytics =
    config.redisUrl !== undefined || config.redisClusterNodes !== undefined
      ? openAnalyticsRedis({ url: config.redisUrl, clusterNodes: config.redisClusterNodes })
      : undefined;
  if (analytics !== undefined) app.addHook('onClose', async () => void analytics.disconnect());
  await app.register(offendersRoutes, {
    repository,
    auth,
    redis: analytics,
    keyPrefix: config.redisKeyPrefix,
    gateways: config.analyticsGateways,
    gatewayAdminToken: config.gatewayAdminToken,
  });

  return app;
}
