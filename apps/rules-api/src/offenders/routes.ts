/**
 * `GET /rules/{id}/offenders?minutes=15` (docs/visibility.md): the clients the gateways denied (or,
 * for a shadow rule, would have denied) under one rule over the last 1–60 minutes, cluster-wide: the
 * per-minute sorted sets every gateway flushes to the Redis they share, merged in Redis. Without
 * REDIS_URL / REDIS_CLUSTER_NODES the rules API cannot see them: 503 SLUICE_ANALYTICS_UNAVAILABLE.
 */
import createError from '@fastify/error';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { minuteOf, OFFENDERS_DEFAULT_MINUTES, OFFENDERS_MAX_MINUTES, OFFENDERS_TOP } from '@sluice/shared';
import { type AnalyticsRedis, readTopOffenders } from '@sluice/shared/redis';
import type { FastifyPluginAsync } from 'fastify';
import Type from 'typebox';
import { type AuthOptions, requireToken } from '../auth.js';
import { RULES_API_ERRORS, RuleNotFoundError } from '../errors.js';
import type { RulesRepository } from '../rules/repository.js';
import type { ErrorBody } from '../rules/schemas.js';
import { readGatewayOffenders } from './gateways.js';

export const AnalyticsUnavailableError = createError<'SLUICE_ANALYTICS_UNAVAILABLE', 503, [string]>(
  'SLUICE_ANALYTICS_UNAVAILABLE',
  'top offenders are not available: %s',
  RULES_API_ERRORS.SLUICE_ANALYTICS_UNAVAILABLE,
);

export interface OffendersRoutesOptions {
  repository: RulesRepository;
  auth: AuthOptions;
  /** the Redis the gateways share; undefined when none is configured */
  redis: AnalyticsRedis | undefined;
  /** the gateways' REDIS_KEY_PREFIX */
  keyPrefix: string;
  /** gateway admin base URLs asked directly when `redis` is undefined (ANALYTICS_GATEWAYS) */
  gateways?: readonly string[] | undefined;
  /** each gateway's bound, ms (default 2 s) */
  gatewayTimeoutMs?: number;
  /** GATEWAY_ADMIN_TOKEN: the gateways' admin answers need it when they have one */
  gatewayAdminToken?: string | undefined;
  /** wall clock, ms since the epoch */
  nowMs?: () => number;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const errorRef = (description: string) => Type.Unsafe<ErrorBody>(Type.Ref('Error', { description }));

const OffendersSchema = Type.Object({
  rule: Type.String({ description: 'the rule id' }),
  minutes: Type.Integer(),
  items: Type.Array(
    Type.Object({
      client: Type.String({ description: 'the client key: `ip:…`, `header:…` or `global`' }),
      limit: Type.String({ description: 'the denying limit; "" for a rule with one `limit`' }),
      denied: Type.Integer({ description: 'denials counted (an upper bound past 64 offenders a minute)' }),
      shadow: Type.Boolean({ description: 'would-be denials of a shadow rule' }),
    }),
    { description: `the top ${OFFENDERS_TOP}, most denied first` },
  ),
});

export const offendersSchema = {
  summary: 'Who the gateways denied under a rule, lately',
  description:
    'The client keys the gateways denied (or would have denied, for a shadow rule) under this rule, counted per limit over the last `minutes` minutes across every gateway sharing the Redis named by REDIS_URL / REDIS_CLUSTER_NODES; gateways send their counts every 5 s. Without a Redis, summed over the gateways listed in ANALYTICS_GATEWAYS (those that answer within 2 s). The read token may call it.',
  tags: ['rules'],
  params: Type.Object({ id: Type.String({ description: 'the rule id (a UUID); anything else is a 404' }) }),
  querystring: Type.Object({
    minutes: Type.Integer({
      minimum: 1,
      maximum: OFFENDERS_MAX_MINUTES,
      default: OFFENDERS_DEFAULT_MINUTES,
      description: 'how many minutes back, this one included',
    }),
  }),
  response: {
    200: OffendersSchema,
    400: errorRef('Bad Request: minutes is not a whole number 1–60'),
    401: errorRef('Unauthorized: missing or wrong bearer token'),
    404: errorRef('Not Found: no rule with this id'),
    503: errorRef(
      'Service Unavailable: no Redis nor ANALYTICS_GATEWAYS configured for analytics, or none of them answers',
    ),
  },
};

export const offendersRoutes: FastifyPluginAsync<OffendersRoutesOptions> = async (app, options) => {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  const nowMs = options.nowMs ?? Date.now;
  api.addHook('onRequest', requireToken(options.auth, 'read'));

  api.get('/rules/:id/offenders', { schema: offendersSchema }, async (request) => {
    const { id: rawId } = request.params;
    if (!UUID.test(rawId)) throw new RuleNotFoundError(rawId.length > 64 ? `${rawId.slice(0, 64)}…` : rawId);
    const id = rawId.toLowerCase();
    const rule = await options.repository.get(id);
    if (rule === undefined) throw new RuleNotFoundError(id);
    const { minutes } = request.query;
    if (options.redis === undefined && options.gateways !== undefined && options.gateways.length > 0) {
      const { items, skipped } = await readGatewayOffenders({
        gateways: options.gateways,
        ruleName: rule.name,
        minutes,
        ...(options.gatewayTimeoutMs === undefined ? {} : { timeoutMs: options.gatewayTimeoutMs }),
        adminToken: options.gatewayAdminToken,
      });
      const unanswered = skipped.map(({ url, reason }) => `${url} (${reason})`).join(', ');
      if (skipped.length === options.gateways.length) {
        request.log.warn({ skipped }, 'offenders: no gateway in ANALYTICS_GATEWAYS answered');
        throw new AnalyticsUnavailableError(`no gateway in ANALYTICS_GATEWAYS answered: ${unanswered}`);
      }
      if (skipped.length > 0) {
        request.log.warn({ skipped }, `offenders: skipped gateways that did not answer: ${unanswered}`);
      }
      return { rule: id, minutes, items };
    }
    if (options.redis === undefined) {
      throw new AnalyticsUnavailableError(
        'the rules API has no REDIS_URL or REDIS_CLUSTER_NODES (set the one the gateways use) nor ANALYTICS_GATEWAYS; a gateway shows its own at GET /offenders on its admin port',
      );
    }
    try {
      const items = await readTopOffenders(options.redis, options.keyPrefix, id, minutes, minuteOf(nowMs()));
      return { rule: id, minutes, items };
    } catch (error) {
      request.log.warn({ err: error }, 'offenders: Redis did not answer');
      throw new AnalyticsUnavailableError(`Redis did not answer (${(error as Error).message})`);
    }
  });
};
