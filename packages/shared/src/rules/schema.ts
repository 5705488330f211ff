/**
 * The rule schema: one TypeBox definition gives the JSON Schema the rules API validates bodies with
 * (and documents in OpenAPI), the TypeScript types, and what the gateway and the rules-file CLI load.
 * The user reference is docs/rules.md. Beside it: defaults.ts fills in defaults, check.ts checks what
 * JSON Schema cannot say, validate.ts runs both on untrusted values; a limit's own fields come from its
 * algorithm's plug-in (limit-schema.ts).
 *
 * Two forms of a rule:
 * - format 1: `limit` (+ optional `client`, `cost`, `maxDebt`): one token bucket. Stored and returned
 *   exactly as written, with its defaults filled in, as before format 2 existed;
 * - format 2: `limits`, a list of 1–8 named limits that all apply, or `unlimited: true` (no limit).
 *
 * The input schema is one flat object (every field of both forms optional) rather than a `oneOf`, so that
 * a bad body gets an error naming its field instead of "must match one of the allowed forms"; which
 * fields go together is `checkRule`'s job. The output schema (`RuleSchema`) is the precise union.
 */
import Type, { type Static } from 'typebox';
import { MAX_DURATION_MS } from '../format/duration.js';
import {
  CLAIM_NAME_PATTERN,
  ClientSchema,
  HEADER_NAME_PATTERN,
  MAX_TOKENS,
  Tokens,
} from '../format/fields.js';
import { TOKEN_BUCKET_FIELDS } from '../limiter/algorithms/token-bucket/rule-format.js';
import { MAX_CLIENT_IPS } from './ip-nets.js';
import { RuleLimitInputSchema, RuleLimitSchema } from './limit-schema.js';

export {
  CLAIM_NAME_PATTERN,
  type Client,
  ClientSchema,
  HEADER_NAME_PATTERN,
  MAX_TOKENS,
  MIN_TOKENS,
  type RuleFieldError,
} from '../format/fields.js';
export {
  LIMIT_ALGORITHMS,
  LIMIT_NAME_PATTERN,
  type LimitAlgorithmName,
  type RuleLimit,
  type RuleLimitInput,
  RuleLimitInputSchema,
  RuleLimitSchema,
} from './limit-schema.js';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

export const RULE_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';
/** Starts with `/`; no `?`, `#`, `%`, `\`, whitespace or control characters (C0, DEL, C1). Segment rules are in `checkRule`. */
export const RULE_PATH_PATTERN = '^/[^?#%\\\\\\s\\u0000-\\u001f\\u007f-\\u009f]*$';
/** A host name or bracketed IPv6 literal, without port. */
export const RULE_HOST_PATTERN =
  '^(\\[[0-9A-Fa-f:.]{2,45}\\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)$';
/**
 * A header value a request can carry as received: visible ASCII with inner spaces or tabs. Servers strip
 * whitespace around a value, so a value that starts or ends with it could never match.
 */
export const HEADER_VALUE_PATTERN = '^([!-~]+([ \\t]+[!-~]+)*)?$';

/** Most limits on one rule. */
export const MAX_LIMITS = 8;
/** Most `match.headers` entries on one rule. */
export const MAX_HEADER_CONDITIONS = 16;
/** Most `match.claims` entries on one rule, and most values one entry lists. */
export const MAX_CLAIM_CONDITIONS = 16;
export const MAX_CLAIM_VALUES = 32;

const ClaimScalar = Type.Union([Type.String({ maxLength: 256 }), Type.Number(), Type.Boolean()]);

const IpList = (description: string) =>
  Type.Array(Type.String({ minLength: 1, maxLength: 64 }), {
    minItems: 1,
    maxItems: MAX_CLIENT_IPS,
    description,
  });

export const RuleMatchSchema = Type.Object(
  {
    path: Type.String({
      minLength: 1,
      maxLength: 512,
      pattern: RULE_PATH_PATTERN,
      description: 'segments split by `/`; `*` matches one segment; a final `**` matches zero or more',
    }),
    methods: Type.Optional(
      Type.Array(Type.Enum([...HTTP_METHODS]), {
        uniqueItems: true,
        maxItems: HTTP_METHODS.length,
        description: 'absent or empty: every method; `GET` also takes `HEAD`',
      }),
    ),
    host: Type.Optional(
      Type.String({
        pattern: RULE_HOST_PATTERN,
        maxLength: 255,
        description: 'exact host, case-insensitive',
      }),
    ),
    headers: Type.Optional(
      Type.Record(
        Type.String({ pattern: HEADER_NAME_PATTERN }),
        Type.String({ pattern: HEADER_VALUE_PATTERN, maxLength: 1024 }),
        {
          additionalProperties: false,
          minProperties: 1,
          maxProperties: MAX_HEADER_CONDITIONS,
          description:
            'header name → exact value (name case-insensitive, value case-sensitive); the request must carry each header exactly once, with that value',
        },
      ),
    ),
    claims: Type.Optional(
      Type.Record(
        Type.String({ pattern: CLAIM_NAME_PATTERN }),
        Type.Union([ClaimScalar, Type.Array(ClaimScalar, { minItems: 1, maxItems: MAX_CLAIM_VALUES })]),
        {
          additionalProperties: false,
          minProperties: 1,
          maxProperties: MAX_CLAIM_CONDITIONS,
          description:
            'claim name → a value or a list of values: a verified token must carry the claim with one of them (a list claim such as `roles` must contain one)',
        },
      ),
    ),
    authenticated: Type.Optional(
      Type.Boolean({
        description: 'true: only requests with a verified bearer token; false: only requests without one',
      }),
    ),
    clientIps: Type.Optional(IpList('IPv4/IPv6 addresses or CIDRs: the client IP must be in one of them')),
    notClientIps: Type.Optional(
      IpList('IPv4/IPv6 addresses or CIDRs: the client IP must be in none of them'),
    ),
    caseInsensitive: Type.Optional(
      Type.Boolean({ description: 'literal path segments compare case-insensitively (ASCII letters)' }),
    ),
  },
  { additionalProperties: false },
);
export type RuleMatch = Static<typeof RuleMatchSchema>;

/** The token bucket of a format-1 rule (`limit`): a token-bucket limit's fields but `maxDebt` (the rule has it). */
export const LimitSchema = Type.Object(
  {
    capacity: TOKEN_BUCKET_FIELDS.capacity,
    refill: TOKEN_BUCKET_FIELDS.refill,
    period: TOKEN_BUCKET_FIELDS.period,
  },
  { additionalProperties: false },
);

export const ChargeSchema = Type.Object(
  {
    from: Type.Enum(['header', 'duration', 'bytes']),
    header: Type.Optional(
      Type.String({ pattern: HEADER_NAME_PATTERN, description: 'with from "header": the response header' }),
    ),
    unitMs: Type.Optional(
      Type.Integer({ minimum: 1, maximum: MAX_DURATION_MS, description: 'with from "duration"' }),
    ),
    unitBytes: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 2 ** 40, description: 'with from "bytes"' }),
    ),
    max: Type.Optional(Tokens("one request's cost at most")),
  },
  { additionalProperties: false, description: 'charge what the request really cost, known at the response' },
);
export type Charge = Static<typeof ChargeSchema>;

export const RefundSchema = Type.Object(
  {
    statuses: Type.Array(
      Type.Union([Type.Integer({ minimum: 100, maximum: 599 }), Type.String({ pattern: '^[1-5]xx$' })], {
        description: 'a status code 100-599 or a class "1xx" … "5xx"',
      }),
      { minItems: 1, maxItems: 64, uniqueItems: true },
    ),
    max: Type.Optional(
      Tokens(
        "most refunds give back per limit and client per period (or window); default the limit's capacity or max",
      ),
    ),
  },
  { additionalProperties: false, description: "refunds of a request's whole cost by upstream status" },
);
export type Refund = Static<typeof RefundSchema>;

export const ModeSchema = Type.Enum(['exact', 'lease'], {
  description:
    '"exact" (default) or "lease": gateways take token-bucket tokens in advance, never admitting more than exact',
});

const Description = Type.String({ maxLength: 1000 });
const Priority = Type.Integer({ minimum: -1_000_000, maximum: 1_000_000 });

/** What a client sends on POST and PUT (both forms; see the module comment). */
export const RuleInputSchema = Type.Object(
  {
    name: Type.String({ pattern: RULE_NAME_PATTERN, maxLength: 64 }),
    description: Type.Optional(Description),
    match: RuleMatchSchema,
    client: Type.Optional(ClientSchema),
    limit: Type.Optional(LimitSchema),
    limits: Type.Optional(
      Type.Array(RuleLimitInputSchema, {
        minItems: 1,
        maxItems: MAX_LIMITS,
        description: 'format 2: named limits that all apply to every request (instead of `limit`)',
      }),
    ),
    cost: Type.Optional(Tokens('tokens one request takes; default 1')),
    maxDebt: Type.Optional(
      Type.Number({ minimum: 0, maximum: MAX_TOKENS, description: 'default: capacity' }),
    ),
    unlimited: Type.Optional(
      Type.Boolean({
        description: 'true: requests this rule takes are never limited (instead of limit/limits)',
      }),
    ),
    charge: Type.Optional(ChargeSchema),
    refund: Type.Optional(RefundSchema),
    mode: Type.Optional(ModeSchema),
    enabled: Type.Optional(Type.Boolean()),
    shadow: Type.Optional(Type.Boolean()),
    priority: Type.Optional(Priority),
  },
  { additionalProperties: false, $id: 'RuleInput' },
);
export type RuleInput = Static<typeof RuleInputSchema>;
/** An input in format 1 (`limit`), for callers that build one. */
export type RuleInputV1 = RuleInput & {
  limit: Static<typeof LimitSchema>;
  limits?: undefined;
  unlimited?: undefined;
};

/** Fields every stored rule has (the server's and the defaults). */
const storedCommon = {
  id: Type.String({ format: 'uuid' }),
  name: Type.String(),
  description: Type.Optional(Type.String()),
  match: RuleMatchSchema,
};
const storedFlags = {
  enabled: Type.Boolean(),
  shadow: Type.Boolean(),
  priority: Type.Integer(),
  version: Type.Integer({ minimum: 1 }),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
};
const storedLifecycle = {
  charge: Type.Optional(ChargeSchema),
  refund: Type.Optional(RefundSchema),
  mode: Type.Optional(ModeSchema),
};

/** A stored format-1 rule: exactly the shape rules had before format 2. */
export const RuleV1Schema = Type.Object(
  {
    ...storedCommon,
    client: ClientSchema,
    limit: LimitSchema,
    cost: Type.Number(),
    maxDebt: Type.Number(),
    ...storedLifecycle,
    ...storedFlags,
  },
  { additionalProperties: false, description: 'format 1: one token bucket (`limit`)' },
);
/** A stored format-2 rule with limits. */
export const RuleV2Schema = Type.Object(
  {
    ...storedCommon,
    limits: Type.Array(RuleLimitSchema, { minItems: 1, maxItems: MAX_LIMITS }),
    cost: Type.Number(),
    ...storedLifecycle,
    ...storedFlags,
  },
  { additionalProperties: false, description: 'format 2: named limits (`limits`)' },
);
/** A stored rule that exempts the requests it takes from every limit. */
export const RuleUnlimitedSchema = Type.Object(
  {
    ...storedCommon,
    unlimited: Type.Literal(true),
    ...storedFlags,
  },
  { additionalProperties: false, description: 'an exemption (`unlimited: true`)' },
);

/** A rule as the API returns it: every default filled in, plus the server's fields. */
export const RuleSchema = Type.Union([RuleV1Schema, RuleV2Schema, RuleUnlimitedSchema], { $id: 'Rule' });
export type RuleV1 = Static<typeof RuleV1Schema>;
export type RuleV2 = Static<typeof RuleV2Schema>;
export type RuleUnlimited = Static<typeof RuleUnlimitedSchema>;
export type Rule = RuleV1 | RuleV2 | RuleUnlimited;

type ServerField = 'id' | 'version' | 'createdAt' | 'updatedAt';
export type RuleFieldsV1 = Omit<RuleV1, ServerField>;
export type RuleFieldsV2 = Omit<RuleV2, ServerField>;
export type RuleFieldsUnlimited = Omit<RuleUnlimited, ServerField>;
/** The writable fields with defaults applied: what the rules API stores. */
export type RuleFields = RuleFieldsV1 | RuleFieldsV2 | RuleFieldsUnlimited;

/** 1 for a rule written with `limit`, 2 for `limits` or `unlimited`. */
export function ruleFormat(rule: RuleInput | RuleFields | Rule): 1 | 2 {
  return 'limit' in rule && rule.limit !== undefined ? 1 : 2;
}
