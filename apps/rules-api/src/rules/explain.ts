/**
 * `POST /rules/explain` (docs/console.md): which rule the gateway would apply to a request and why,
 * charging nothing. The rule set is compiled with the gateway's own matcher once per rule-set version.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { compileExplainer, type Rule, type RuleExplainer } from '@sluice/shared';
import type { FastifyPluginAsync } from 'fastify';
import Type, { type Static } from 'typebox';
import { type AuthOptions, requireToken } from '../auth.js';
import type { ErrorBody } from './schemas.js';
import type { SnapshotCache } from './snapshot-cache.js';

export interface ExplainRoutesOptions {
  snapshots: SnapshotCache;
  auth: AuthOptions;
}

const HeaderValue = Type.String({ maxLength: 8192 });

export const ExplainBodySchema = Type.Object(
  {
    method: Type.String({
      pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$",
      description:
        'the HTTP method, case-sensitive as on the wire (`get` is refused, as the gateway refuses it)',
    }),
    host: Type.Optional(Type.String({ maxLength: 1024, description: 'the Host header, port allowed' })),
    path: Type.String({
      minLength: 1,
      maxLength: 8192,
      description: 'the raw request-target (path and optional `?query`), normalised like the gateway does',
    }),
    headers: Type.Optional(
      Type.Record(
        Type.String({ pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$" }),
        Type.Union([HeaderValue, Type.Array(HeaderValue, { maxItems: 16 })]),
        {
          maxProperties: 64,
          additionalProperties: false,
          description: 'header name → value, or the values of a header sent several times',
        },
      ),
    ),
    clientIp: Type.Optional(
      Type.Union([Type.String({ format: 'ipv4' }), Type.String({ format: 'ipv6' })], {
        description: 'an IPv4 or IPv6 address: the client IP as the gateway would see it',
      }),
    ),
  },
  { additionalProperties: false },
);
export type ExplainBody = Static<typeof ExplainBodySchema>;

const ClientKey = Type.String({
  description:
    '`ip:203.0.113.7`, `ip:2001:db8:1:2::/64`, `header:<value>` (SHA-256 hex over 256 bytes) or `global`',
});

export const ExplanationSchema = Type.Object({
  path: Type.Union([Type.String(), Type.Null()], { description: 'the normalised path; null when refused' }),
  error: Type.Union([
    Type.Null(),
    Type.Object({ statusCode: Type.Literal(400), code: Type.String(), message: Type.String() }),
  ]),
  host: Type.Union([Type.String(), Type.Null()], { description: 'the host as rules compare it' }),
  rule: Type.Union([Type.Null(), Type.Object({ id: Type.String(), name: Type.String() })]),
  unlimited: Type.Boolean(),
  limits: Type.Array(Type.Object({ name: Type.String(), algorithm: Type.String(), clientKey: ClientKey })),
  considered: Type.Array(
    Type.Object({ name: Type.String(), matched: Type.Boolean(), reason: Type.String() }),
    {
      description:
        'every rule whose path pattern takes the normalised path, the chosen one first (at most 25), with why each was or was not chosen',
    },
  ),
});

const errorRef = (description: string) => Type.Unsafe<ErrorBody>(Type.Ref('Error', { description }));

export const explainSchema = {
  summary: 'Which rule would apply to a request, and why',
  description:
    "Uses the gateway's own path normaliser and matcher on the current rule set; charges nothing. The read token may call it.",
  tags: ['rules'],
  body: ExplainBodySchema,
  response: {
    200: ExplanationSchema,
    400: errorRef('Bad Request: the body is invalid; the message names the field'),
    401: errorRef('Unauthorized: missing or wrong bearer token'),
    503: errorRef('Service Unavailable: the database does not answer'),
  },
};

/** The explainer of the newest rule-set version, compiled once per version (concurrent calls share it). */
class ExplainerCache {
  private current: { version: number; explainer: Promise<RuleExplainer> } | undefined;

  constructor(private readonly snapshots: SnapshotCache) {}

  async get(): Promise<RuleExplainer> {
    const body = await this.snapshots.full();
    if (this.current === undefined || this.current.version < body.version) {
      const { rules } = JSON.parse(body.json.toString('utf8')) as { rules: Rule[] };
      this.current = { version: body.version, explainer: Promise.resolve(compileExplainer(rules)) };
    }
    return this.current.explainer;
  }
}

export const explainRoutes: FastifyPluginAsync<ExplainRoutesOptions> = async (app, options) => {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  const explainers = new ExplainerCache(options.snapshots);
  api.addHook('onRequest', requireToken(options.auth, 'read'));

  api.post('/rules/explain', { schema: explainSchema }, async (request) => {
    const explainer = await explainers.get();
    return explainer.explain(request.body);
  });
};
