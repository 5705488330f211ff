/**
 * The OpenAPI document of the rules API (`GET /openapi.json`), as @fastify/swagger options: what the
 * route schemas cannot say themselves. Users' tools read it (Redocly's `recommended` lint, client
 * generators such as openapi-typescript), so it carries
 * - `servers` (relative: the API that serves the document),
 * - a stable `operationId` for every operation, in one table here, so generated SDKs get these method
 *   names rather than made-up ones,
 * - `info.license`,
 * - a `type` on every `enum` (TypeBox writes `{ enum: [...] }` alone, which generators type as unknown).
 */
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';

/** `<METHOD> <route url>` → operationId. Every documented route needs one (test/openapi-tools.int.test.ts). */
export const OPERATION_IDS: Readonly<Record<string, string>> = {
  'GET /healthz': 'checkLiveness',
  'GET /readyz': 'checkReadiness',
  'GET /auth/me': 'getCurrentCredential',
  'POST /rules': 'createRule',
  'GET /rules': 'listRules',
  'GET /rules/snapshot': 'getSnapshot',
  'GET /rules/{id}': 'getRule',
  'PUT /rules/{id}': 'replaceRule',
  'DELETE /rules/{id}': 'deleteRule',
  'GET /rules/{id}/history': 'listRuleHistory',
  'GET /rules/{id}/offenders': 'listRuleOffenders',
  'POST /rules/explain': 'explainRequest',
};

/**
 * The repository declares no license yet; `UNLICENSED` (npm's word for "no permission to use is
 * granted", the URL defines it) says exactly that. Change both here when the project chooses one.
 */
export const API_LICENSE = {
  name: 'UNLICENSED',
  url: 'https://docs.npmjs.com/cli/v10/configuring-npm/package-json#license',
};

/** Fastify's `/rules/:id` → OpenAPI's `/rules/{id}`. */
function openapiPath(url: string): string {
  return url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

type JsonValue = unknown;

/** The JSON type every value of an enum has, if they agree (`string`, `integer`, `number`, `boolean`). */
function enumType(values: unknown[]): string | undefined {
  const types = new Set(
    values.map((v) => (typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v)),
  );
  if (types.size === 2 && types.has('integer') && types.has('number')) return 'number';
  const [only] = types;
  return types.size === 1 &&
    (only === 'string' || only === 'integer' || only === 'number' || only === 'boolean')
    ? only
    : undefined;
}

/** A copy of `value` in which every schema with an `enum` and no `type` gets the type of its values. */
export function withTypedEnums(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(withTypedEnums);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, JsonValue> = {};
  for (const [key, inner] of Object.entries(value)) out[key] = withTypedEnums(inner);
  if (Array.isArray(out.enum) && out.type === undefined) {
    const type = enumType(out.enum);
    if (type !== undefined) out.type = type;
  }
  return out;
}

export function openapiOptions(version: string): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Sluice rules API',
        version,
        license: API_LICENSE,
        description: [
          'Per-path rate-limit rules for the Sluice gateway.',
          'Rules, in both formats (one `limit`, or a list of `limits`), are described in `docs/rules.md`',
          'of the Sluice repository; this API (tokens, errors, ETags, cursors, history) in `docs/rules-api.md`,',
          'and the bucket and window arithmetic in `docs/limits.md`.',
        ].join(' '),
      },
      servers: [{ url: '/', description: 'the rules API that serves this document' }],
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description: 'ADMIN_TOKEN for everything, READ_TOKEN for reads only (GET)',
          },
        },
      },
      security: [{ bearer: [] }],
      tags: [
        { name: 'rules', description: 'rule management' },
        { name: 'auth', description: 'what the token in use may do' },
        { name: 'health', description: 'liveness and readiness' },
      ],
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === 'string' ? json.$id : `def-${i}`,
    },
    transform: ({ schema, url, route }) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      const operationId = OPERATION_IDS[`${methods[0]} ${openapiPath(url)}`];
      if (schema === undefined || schema === null || operationId === undefined) return { schema, url };
      return { schema: { ...schema, operationId } as typeof schema, url };
    },
    transformObject: (document) =>
      withTypedEnums(
        'openapiObject' in document ? document.openapiObject : document.swaggerObject,
      ) as ReturnType<NonNullable<FastifyDynamicSwaggerOptions['transformObject']>>,
  };
}
