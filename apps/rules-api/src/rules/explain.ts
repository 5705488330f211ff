/**
 * `POST /rules/explain` (docs/console.md): which rule the gateway would apply to a request and why,
 * charging nothing. The rule set is compiled with the gateway's own matcher once per rule-set version.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  bearerToken,
  compileExplainer,
  type ExplainedIdentity,
  type Rule,
  type RuleExplainer,
  type SecretClientKeys,
  type TokenVerifier,
} from '@sluice/shared';
import type { FastifyPluginAsync } from 'fastify';
import Type, { type Static } from 'typebox';
import { type AuthOptions, requireToken } from '../auth.js';
import type { ErrorBody } from './schemas.js';
import type { SnapshotCache } from './snapshot-cache.js';

export interface ExplainRoutesOptions {
  snapshots: SnapshotCache;
  auth: AuthOptions;
  /** JWT_*: verifies a bearer token as a gateway would; undefined: every request is unauthenticated */
  verifier?: TokenVerifier | undefined;
  /** CLIENT_KEY_SECRET: credential headers are keyed as the gateways key them */
  secretKeys?: SecretClientKeys | undefined;
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
    '`ip:203.0.113.7`, `ip:2001:db8:1:2::/64`, `header:<value>` (SHA-256 hex over 256 bytes), `header:~<HMAC>` (a credential header, never in clear), `jwt:<claim value>` or `global`',
});

const IdentitySchema = Type.Union(
  [
    Type.Object({
      authenticated: Type.Literal(true),
      claims: Type.Record(Type.String(), Type.Unknown(), { description: "the verified token's claims" }),
    }),
    Type.Object({
      authenticated: Type.Literal(false),
      reason: Type.String({
        description:
          'no bearer token, not configured (no JWT_* on the rules API), or why the token did not verify: expired, not_yet_valid, wrong_issuer, wrong_audience, claim_invalid, algorithm_not_allowed, bad_signature, unknown_key, malformed, jwks_unavailable',
      }),
      message: Type.Optional(Type.String()),
    }),
  ],
  { description: 'the verified identity the rules were matched and keyed with (JWT_* as on the gateways)' },
);

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
  identity: IdentitySchema,
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

  constructor(
    private readonly snapshots: SnapshotCache,
    private readonly secretKeys: SecretClientKeys | undefined,
  ) {}

  async get(): Promise<RuleExplainer> {
    const body = await this.snapshots.full();
    if (this.current === undefined || this.current.version < body.version) {
      const { rules } = JSON.parse(body.json.toString('utf8')) as { rules: Rule[] };
      this.current = {
        version: body.version,
        explainer: Promise.resolve(compileExplainer(rules, { secretKeys: this.secretKeys })),
      };
    }
    return this.current.explainer;
  }
}

export const explainRoutes: FastifyPluginAsync<ExplainRoutesOptions> = async (app, options) => {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  const explainers = new ExplainerCache(options.snapshots, options.secretKeys);
  api.addHook('onRequest', requireToken(options.auth, 'read'));

  api.post('/rules/explain', { schema: explainSchema }, async (request) => {
    const explainer = await explainers.get();
    const identity = await identityOf(request.body.headers, options.verifier);
    return explainer.explain({ ...request.body, identity });
  });
};

/** The verified identity of the request's `Authorization: Bearer` header, as a gateway would see it. */
async function identityOf(
  headers: ExplainBody['headers'],
  verifier: TokenVerifier | undefined,
): Promise<ExplainedIdentity> {
  const name = Object.keys(headers ?? {}).find((key) => key.toLowerCase() === 'authorization');
  const value = name === undefined ? undefined : headers![name];
  // Node keeps the first Authorization line of a request that repeats it
  const token = bearerToken(typeof value === 'string' ? value.trim() : value?.[0]?.trim());
  if (token === undefined) return { authenticated: false, reason: 'no bearer token' };
  if (verifier === undefined) {
    return {
      authenticated: false,
      reason: 'not configured',
      message:
        "the rules API has neither JWT_JWKS_URL nor JWT_SECRET: set the gateways' JWT_* here to verify tokens",
    };
  }
  const outcome = await verifier.verify(token);
  return outcome.ok
    ? { authenticated: true, claims: outcome.claims }
    : { authenticated: false, reason: outcome.reason, message: outcome.message };
}
