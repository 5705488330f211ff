/**
 * Route schemas of the rules API. The rule shapes come from `@sluice/shared` (registered once with
 * `addSchema` under their `$id`s `Rule` and `RuleInput`, and referenced here), so the API validates
 * and documents exactly what the gateway loads.
 */
import { type Rule, type RuleInput, RuleInputSchema, RuleSchema } from '@sluice/shared';
import Type, { type Static, type TSchema } from 'typebox';

export const ErrorSchema = Type.Object(
  {
    statusCode: Type.Integer({ description: 'the HTTP status, repeated' }),
    error: Type.String({ description: 'the HTTP reason phrase' }),
    message: Type.String({
      description: 'what went wrong; for a 400, it names the field (`body/limit/capacity …`)',
    }),
    code: Type.Optional(Type.String({ description: 'stable error code, e.g. `SLUICE_RULE_NOT_FOUND`' })),
  },
  { $id: 'Error', additionalProperties: false },
);
export type ErrorBody = Static<typeof ErrorSchema>;

/** Schemas registered with `app.addSchema` (and listed as OpenAPI components). */
export const SHARED_SCHEMAS: TSchema[] = [RuleInputSchema, RuleSchema, ErrorSchema];

export const RuleRef = Type.Unsafe<Rule>(Type.Ref('Rule'));
export const RuleInputRef = Type.Unsafe<RuleInput>(Type.Ref('RuleInput'));

const ERROR_DESCRIPTIONS = {
  400: 'Bad Request: invalid body, query or header (an empty If-Match too); the message names it',
  401: 'Unauthorized: missing or wrong bearer token',
  403: 'Forbidden: the read-only token on a write',
  404: 'Not Found: no rule with this id',
  409: 'Conflict: another rule has this name',
  412: 'Precondition Failed: If-Match does not name the current version',
  413: 'Payload Too Large: body over the limit',
  415: 'Unsupported Media Type: the body must be application/json, uncompressed (no Content-Encoding)',
  500: 'Internal Server Error',
  503: 'Service Unavailable: the database does not answer',
} as const;
type ErrorStatus = keyof typeof ERROR_DESCRIPTIONS;

const errorRef = (status: ErrorStatus) =>
  Type.Unsafe<ErrorBody>(Type.Ref('Error', { description: ERROR_DESCRIPTIONS[status] }));

/** The error responses every protected route can give, plus `extra`. */
function errorResponses<S extends ErrorStatus>(...extra: S[]) {
  const statuses = [401, 500, 503, ...extra] as const;
  return Object.fromEntries(statuses.map((s) => [s, errorRef(s)])) as Record<
    401 | 500 | 503 | S,
    ReturnType<typeof errorRef>
  >;
}

export const IdParams = Type.Object({
  id: Type.String({ description: 'the rule id (a UUID); anything else is a 404' }),
});

const ETagHeader = { ETag: { type: 'string', description: 'the version as an entity tag: `"<version>"`' } };
const withHeaders = <T extends TSchema>(schema: T, headers: Record<string, unknown>): T =>
  ({ ...schema, headers }) as T;

export const IfMatchHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'the version the change applies to, e.g. `"3"` (or `*`); 412 when it is not current; present but empty: 400 `SLUICE_IF_MATCH_EMPTY`',
    }),
  ),
});

const nextCursor = Type.Union([Type.String(), Type.Null()], {
  description: 'pass as `?cursor=` to get the next page; null on the last page',
});

export const ListQuery = Type.Object({
  enabled: Type.Optional(Type.Boolean({ description: 'only enabled (true) or disabled (false) rules' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100, description: 'page size' })),
  cursor: Type.Optional(Type.String({ description: "the previous page's `nextCursor`" })),
});

export const HistoryQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100, description: 'page size' })),
  cursor: Type.Optional(Type.String({ description: "the previous page's `nextCursor`" })),
});

/** Each listed rule's limits in words, by rule id (`ruleSummary`: what the console shows). */
const Summaries = Type.Record(Type.String(), Type.Array(Type.String()), {
  description:
    "rule id → one line per limit, in the rule's order, e.g. `burst: 5 per x-api-key, 1 more every 1s (token bucket)`; `no limit` for an unlimited rule. Beside the rules, never inside them: rules are returned exactly as written",
});

export const RuleListSchema = Type.Object({ items: Type.Array(RuleRef), nextCursor, summaries: Summaries });

export const SnapshotSchema = Type.Object({
  version: Type.Integer({
    minimum: 0,
    description: 'the rule-set version: grows with every committed change, never goes back',
  }),
  rules: Type.Array(RuleRef, { description: 'every rule, enabled and disabled, ordered by name' }),
});

export const HistoryItemSchema = Type.Object({
  version: Type.Integer({
    description: 'the rule version this change produced (a delete: last version + 1)',
  }),
  action: Type.Enum(['create', 'update', 'delete']),
  at: Type.String({ format: 'date-time' }),
  actor: Type.String({
    description: 'which credential made the change: `admin`, or `anonymous` without auth',
  }),
  rule: Type.Unsafe<Rule>(
    Type.Ref('Rule', { description: 'the rule after the change (for a delete: as it was when deleted)' }),
  ),
});

export const HistorySchema = Type.Object({ items: Type.Array(HistoryItemSchema), nextCursor });

const NoBody = (description: string) => Type.Unsafe<undefined>(Type.Null({ description }));

export const createRuleSchema = {
  summary: 'Create a rule',
  tags: ['rules'],
  body: RuleInputRef,
  response: {
    201: withHeaders(Type.Unsafe<Rule>(Type.Ref('Rule', { description: 'the rule as stored' })), {
      Location: { type: 'string', description: '`/rules/{id}`' },
      ...ETagHeader,
    }),
    ...errorResponses(400, 403, 409, 413, 415),
  },
};

export const listRulesSchema = {
  summary: 'List rules, ordered by name',
  tags: ['rules'],
  querystring: ListQuery,
  response: { 200: RuleListSchema, ...errorResponses(400) },
};

export const getRuleSchema = {
  summary: 'Get one rule',
  tags: ['rules'],
  params: IdParams,
  response: {
    200: withHeaders(Type.Unsafe<Rule>(Type.Ref('Rule', { description: 'the rule' })), ETagHeader),
    ...errorResponses(404),
  },
};

export const replaceRuleSchema = {
  summary: 'Replace every writable field of a rule',
  description: 'Optional fields left out take their defaults again. `If-Match` makes the write conditional.',
  tags: ['rules'],
  params: IdParams,
  headers: IfMatchHeaders,
  body: RuleInputRef,
  response: {
    200: withHeaders(Type.Unsafe<Rule>(Type.Ref('Rule', { description: 'the rule as stored' })), ETagHeader),
    ...errorResponses(400, 403, 404, 409, 412, 413, 415),
  },
};

export const deleteRuleSchema = {
  summary: 'Delete a rule',
  tags: ['rules'],
  params: IdParams,
  headers: IfMatchHeaders,
  response: { 204: NoBody('deleted'), ...errorResponses(400, 403, 404, 412) },
};

export const snapshotSchema = {
  summary: 'Every rule and the rule-set version (what gateways poll)',
  description: 'Send the last `ETag` as `If-None-Match`: an unchanged rule set answers 304 with no body.',
  tags: ['rules'],
  headers: Type.Object({
    'if-none-match': Type.Optional(Type.String({ description: 'the ETag of the snapshot you have' })),
  }),
  response: {
    200: withHeaders(SnapshotSchema, ETagHeader),
    304: withHeaders(NoBody('unchanged since the snapshot named by If-None-Match'), ETagHeader),
    ...errorResponses(),
  },
};

export const historySchema = {
  summary: "A rule's changes, newest first",
  description: 'Still served after the rule is deleted.',
  tags: ['rules'],
  params: IdParams,
  querystring: HistoryQuery,
  response: { 200: HistorySchema, ...errorResponses(400, 404) },
};
