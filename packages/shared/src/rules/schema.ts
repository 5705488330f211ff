/**
 * The rule schema: one TypeBox definition gives the JSON Schema the rules API validates bodies with
 * (and documents in OpenAPI), the TypeScript types, and the checks the gateway and the rules-file CLI
 * run. The user reference is docs/rules.md.
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
import Compile from 'typebox/compile';
import { canonicalRulePath, normalizePath } from '../http/normalize-path.js';
import { DURATION_PATTERN, DurationError, MAX_DURATION_MS, parseDuration } from './duration.js';
import { MAX_CLIENT_IPS, parseIpNet } from './ip-nets.js';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

export const RULE_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';
export const LIMIT_NAME_PATTERN = '^[a-z0-9][a-z0-9_-]{0,31}$';
/** Starts with `/`; no `?`, `#`, `%`, `\`, whitespace or control characters (C0, DEL, C1). Segment rules are in `checkRule`. */
export const RULE_PATH_PATTERN = '^/[^?#%\\\\\\s\\u0000-\\u001f\\u007f-\\u009f]*$';
/** A host name or bracketed IPv6 literal, without port. */
export const RULE_HOST_PATTERN =
  '^(\\[[0-9A-Fa-f:.]{2,45}\\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)$';
/** An HTTP header field name (RFC 9110 token). */
export const HEADER_NAME_PATTERN = "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$";
/**
 * A header value a request can carry as received: visible ASCII with inner spaces or tabs. Servers strip
 * whitespace around a value, so a value that starts or ends with it could never match.
 */
export const HEADER_VALUE_PATTERN = '^([!-~]+([ \\t]+[!-~]+)*)?$';

/** Upper bound for capacity, refill, cost, max and maxDebt: keeps the arithmetic exact in doubles. */
export const MAX_TOKENS = 1e12;
/**
 * Lower bound for capacity, refill, cost and max: a thousandth of a token. Anything smaller is a typo or
 * a way to write a rule that never limits (`cost: 1e-300`), not a policy.
 */
export const MIN_TOKENS = 0.001;
/** Most limits on one rule. */
export const MAX_LIMITS = 8;
/** Most `match.headers` entries on one rule. */
export const MAX_HEADER_CONDITIONS = 16;
/** Most concurrent requests a concurrency limit may allow. */
export const MAX_CONCURRENCY = 1_000_000;

const Tokens = (description: string) =>
  Type.Number({ minimum: MIN_TOKENS, maximum: MAX_TOKENS, description });
const Duration = (description: string) =>
  Type.Union(
    [Type.String({ pattern: DURATION_PATTERN }), Type.Integer({ minimum: 1, maximum: MAX_DURATION_MS })],
    { description },
  );
const DURATION_WORDS = 'a duration like "500ms", "1s", "1m", "1h", "1d" or an integer of milliseconds';

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

export const ClientSchema = Type.Object(
  {
    by: Type.Enum(['ip', 'header', 'global']),
    name: Type.Optional(
      Type.String({
        pattern: HEADER_NAME_PATTERN,
        description: 'header name, required when `by` is `header`',
      }),
    ),
  },
  { additionalProperties: false },
);
export type Client = Static<typeof ClientSchema>;

/** The token bucket of a format-1 rule (`limit`). */
export const LimitSchema = Type.Object(
  {
    capacity: Tokens('most tokens the bucket holds (the burst)'),
    refill: Tokens('tokens gained every `period`, continuously'),
    period: Duration(DURATION_WORDS),
  },
  { additionalProperties: false },
);

export const LIMIT_ALGORITHMS = ['token-bucket', 'sliding-window', 'concurrency'] as const;
export type LimitAlgorithmName = (typeof LIMIT_ALGORITHMS)[number];

/** One named limit of a format-2 rule as written: which fields go with which algorithm is `checkRule`'s job. */
export const RuleLimitInputSchema = Type.Object(
  {
    name: Type.String({ pattern: LIMIT_NAME_PATTERN, description: 'unique within the rule' }),
    client: Type.Optional(ClientSchema),
    algorithm: Type.Optional(Type.Enum([...LIMIT_ALGORITHMS], { description: 'default "token-bucket"' })),
    capacity: Type.Optional(Tokens('token bucket: most tokens the bucket holds (the burst)')),
    refill: Type.Optional(Tokens('token bucket: tokens gained every `period`, continuously')),
    period: Type.Optional(Duration(`token bucket: ${DURATION_WORDS}`)),
    maxDebt: Type.Optional(
      Type.Number({ minimum: 0, maximum: MAX_TOKENS, description: 'token bucket: default capacity' }),
    ),
    max: Type.Optional(
      Tokens('sliding window: most cost per window; concurrency: most requests in flight (an integer)'),
    ),
    window: Type.Optional(Duration(`sliding window: ${DURATION_WORDS}`)),
    cost: Type.Optional(Tokens("overrides the rule's cost for this limit (not for concurrency)")),
  },
  { additionalProperties: false },
);
export type RuleLimitInput = Static<typeof RuleLimitInputSchema>;

export const TokenBucketLimitSchema = Type.Object(
  {
    name: Type.String(),
    client: ClientSchema,
    algorithm: Type.Literal('token-bucket'),
    capacity: Type.Number(),
    refill: Type.Number(),
    period: Type.Union([Type.String(), Type.Integer()]),
    maxDebt: Type.Number(),
    cost: Type.Optional(Type.Number()),
  },
  { additionalProperties: false },
);
export const SlidingWindowLimitSchema = Type.Object(
  {
    name: Type.String(),
    client: ClientSchema,
    algorithm: Type.Literal('sliding-window'),
    max: Type.Number(),
    window: Type.Union([Type.String(), Type.Integer()]),
    cost: Type.Optional(Type.Number()),
  },
  { additionalProperties: false },
);
export const ConcurrencyLimitSchema = Type.Object(
  {
    name: Type.String(),
    client: ClientSchema,
    algorithm: Type.Literal('concurrency'),
    max: Type.Integer(),
  },
  { additionalProperties: false },
);
/** One limit of a stored format-2 rule: `client` and `algorithm` (and a token bucket's `maxDebt`) filled in. */
export const RuleLimitSchema = Type.Union([
  TokenBucketLimitSchema,
  SlidingWindowLimitSchema,
  ConcurrencyLimitSchema,
]);
export type RuleLimit = Static<typeof RuleLimitSchema>;

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

/** A problem with one field; `field` is a dotted path such as `limit.period` or `limits.1.capacity`. */
export interface RuleFieldError {
  field: string;
  message: string;
}

function matchWithDefaults(input: RuleMatch): RuleMatch {
  const match: RuleMatch = { path: input.path };
  if (input.methods !== undefined) match.methods = input.methods;
  if (input.host !== undefined) match.host = input.host.toLowerCase();
  if (input.headers !== undefined) {
    // fromEntries defines own properties, so even a `__proto__` key could not touch the prototype
    match.headers = Object.fromEntries(
      Object.entries(input.headers).map(([name, value]) => [name.toLowerCase(), value]),
    );
  }
  if (input.clientIps !== undefined) match.clientIps = [...input.clientIps];
  if (input.notClientIps !== undefined) match.notClientIps = [...input.notClientIps];
  if (input.caseInsensitive !== undefined) match.caseInsensitive = input.caseInsensitive;
  return match;
}

function clientWithDefaults(input: Client | undefined): Client {
  return input?.by === 'header'
    ? { by: 'header', name: (input.name ?? '').toLowerCase() }
    : { by: input?.by ?? 'ip' };
}

function limitWithDefaults(input: RuleLimitInput): RuleLimit {
  const client = clientWithDefaults(input.client);
  const cost = input.cost !== undefined ? { cost: input.cost } : {};
  switch (input.algorithm ?? 'token-bucket') {
    case 'sliding-window':
      return {
        name: input.name,
        client,
        algorithm: 'sliding-window',
        max: input.max!,
        window: input.window!,
        ...cost,
      };
    case 'concurrency':
      return { name: input.name, client, algorithm: 'concurrency', max: input.max! };
    default:
      return {
        name: input.name,
        client,
        algorithm: 'token-bucket',
        capacity: input.capacity!,
        refill: input.refill!,
        period: input.period!,
        maxDebt: input.maxDebt ?? input.capacity!,
        ...cost,
      };
  }
}

function lifecycleWithDefaults(input: RuleInput): Pick<RuleFieldsV2, 'charge' | 'refund' | 'mode'> {
  const out: Pick<RuleFieldsV2, 'charge' | 'refund' | 'mode'> = {};
  if (input.charge !== undefined) out.charge = { ...input.charge };
  if (input.refund !== undefined) out.refund = { statuses: [...input.refund.statuses] };
  if (input.mode !== undefined) out.mode = input.mode;
  return out;
}

/**
 * Fills in the defaults of a checked input (run `checkRule` first). A PUT goes through here too, so an
 * omitted `maxDebt` follows `capacity`. Key order is the order the API shows.
 */
export function withDefaults(input: RuleInputV1): RuleFieldsV1;
export function withDefaults(input: RuleInput): RuleFields;
export function withDefaults(input: RuleInput): RuleFields {
  const head = {
    name: input.name,
    ...(input.description !== undefined ? { description: input.description } : {}),
    match: matchWithDefaults(input.match),
  };
  const flags = {
    enabled: input.enabled ?? true,
    shadow: input.shadow ?? false,
    priority: input.priority ?? 0,
  };
  if (input.limits !== undefined) {
    return {
      ...head,
      limits: input.limits.map(limitWithDefaults),
      cost: input.cost ?? 1,
      ...lifecycleWithDefaults(input),
      ...flags,
    };
  }
  if (input.unlimited === true) return { ...head, unlimited: true, ...flags };
  if (input.limit === undefined) throw new TypeError('withDefaults: a rule needs limit, limits or unlimited');
  return {
    ...head,
    client: clientWithDefaults(input.client),
    limit: { ...input.limit },
    cost: input.cost ?? 1,
    maxDebt: input.maxDebt ?? input.limit.capacity,
    ...lifecycleWithDefaults(input),
    ...flags,
  };
}

// ---------------------------------------------------------------------------------------------
// checkRule: what JSON Schema cannot say

/** Names a header lookup on a plain object would find on its prototype (`constructor`, `__proto__` …). */
const PROTOTYPE_NAMES: ReadonlySet<string> = new Set(
  [...Object.getOwnPropertyNames(Object.prototype), '__proto__'].map((n) => n.toLowerCase()),
);

/** True for a header name that must not be used (it is a property of every plain object). */
export function isPrototypeHeaderName(name: string): boolean {
  return PROTOTYPE_NAMES.has(name.toLowerCase());
}

/** Characters that make text display in another order than it is read (Trojan Source, CVE-2021-42574). */
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

type Errors = RuleFieldError[];
const fail = (errors: Errors, field: string, message: string) => errors.push({ field, message });

function checkPath(path: string, errors: Errors): void {
  const before = errors.length;
  if (BIDI_CONTROLS.test(path)) {
    fail(
      errors,
      'match.path',
      'must not contain bidirectional control characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C)',
    );
  }
  if (LONE_SURROGATE.test(path)) fail(errors, 'match.path', 'must be well-formed Unicode (a lone surrogate)');
  const segments = path.split('/').slice(1);
  // a single trailing slash is allowed and means the same as none (see pathSegments)
  if (segments.length > 1 && segments[segments.length - 1] === '') segments.pop();
  segments.forEach((segment, i) => {
    if (segment === '' && path !== '/') {
      fail(errors, 'match.path', 'must not contain empty segments (`//`)');
    } else if (segment === '.' || segment === '..') {
      fail(errors, 'match.path', 'must not contain `.` or `..` segments');
    } else if (segment === '**' && i !== segments.length - 1) {
      fail(errors, 'match.path', '`**` is only allowed as the final segment');
    }
  });
  if (errors.length > before) return;
  // A rule for a path the gateway refuses on the wire (`;`, a trailing dot, a look-alike slash…)
  // could never match anything: say so now rather than store a rule that silently does nothing.
  const normalized = normalizePath(canonicalRulePath(path));
  if (!normalized.ok) {
    fail(
      errors,
      'match.path',
      `no request could ever match it: the gateway refuses such paths with 400 (${normalized.code}: ${normalized.message})`,
    );
  }
}

function checkMatch(match: RuleMatch, errors: Errors): void {
  checkPath(match.path, errors);
  if (match.headers !== undefined) {
    const seen = new Map<string, string>();
    for (const name of Object.keys(match.headers)) {
      const field = `match.headers.${name}`;
      const lower = name.toLowerCase();
      if (isPrototypeHeaderName(name)) {
        fail(
          errors,
          field,
          'is not allowed as a header name (it names a property of every JavaScript object)',
        );
      } else if (seen.has(lower)) {
        fail(
          errors,
          field,
          `names the same header as "${seen.get(lower)}" (header names are case-insensitive)`,
        );
      }
      seen.set(lower, name);
    }
  }
  for (const key of ['clientIps', 'notClientIps'] as const) {
    match[key]?.forEach((value, i) => {
      const net = parseIpNet(value);
      if (typeof net === 'string') fail(errors, `match.${key}.${i}`, net);
    });
  }
}

function checkClient(client: Client | undefined, at: string, errors: Errors): void {
  if (client === undefined) return;
  if (client.by === 'header' && !client.name) {
    fail(errors, `${at}.name`, `is required when ${at}.by is "header"`);
  }
  if (client.by !== 'header' && client.name !== undefined) {
    fail(errors, `${at}.name`, `is only allowed when ${at}.by is "header"`);
  }
  if (client.name !== undefined && isPrototypeHeaderName(client.name)) {
    fail(
      errors,
      `${at}.name`,
      'is not allowed as a header name (it names a property of every JavaScript object)',
    );
  }
}

function checkDuration(value: string | number | undefined, field: string, errors: Errors): number {
  if (value === undefined) return Number.NaN;
  try {
    return parseDuration(value);
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    fail(errors, field, err.message);
    return Number.NaN;
  }
}

/** A token bucket no request could ever pass is a mistake, not a policy: say so instead of answering 429 forever. */
function checkBucketAdmits(
  capacity: number,
  maxDebt: number,
  cost: number,
  at: { capacity: string; cost: string; maxDebt: string },
  errors: Errors,
): void {
  if (capacity < Math.min(cost, 1)) {
    fail(errors, at.capacity, 'must be at least 1 (or at least cost, when cost < 1)');
  } else if (cost > capacity + maxDebt) {
    fail(errors, at.cost, `must not exceed ${at.capacity} + ${at.maxDebt}, or no request could pass`);
  }
}

const ALGORITHM_FIELDS: Record<LimitAlgorithmName, { required: string[]; allowed: string[] }> = {
  'token-bucket': { required: ['capacity', 'refill', 'period'], allowed: ['maxDebt', 'cost'] },
  'sliding-window': { required: ['max', 'window'], allowed: ['cost'] },
  concurrency: { required: ['max'], allowed: [] },
};
const COMMON_LIMIT_FIELDS = new Set(['name', 'client', 'algorithm']);

function checkLimit(limit: RuleLimitInput, i: number, ruleCost: number | undefined, errors: Errors): void {
  const at = `limits.${i}`;
  const algorithm = limit.algorithm ?? 'token-bucket';
  const fields = ALGORITHM_FIELDS[algorithm];
  const written = limit as Record<string, unknown>;
  for (const key of Object.keys(limit)) {
    if (written[key] === undefined || COMMON_LIMIT_FIELDS.has(key)) continue;
    if (fields.required.includes(key) || fields.allowed.includes(key)) continue;
    const why =
      algorithm === 'concurrency' && key === 'cost'
        ? 'a concurrency limit always takes one slot per request'
        : limit.algorithm === undefined
          ? 'algorithm defaults to "token-bucket"'
          : `the fields of ${algorithm} are ${[...fields.required, ...fields.allowed].join(', ')}`;
    fail(errors, `${at}.${key}`, `is not a field of a ${algorithm} limit (${why})`);
  }
  for (const key of fields.required) {
    if (written[key] === undefined) fail(errors, `${at}.${key}`, `is required for a ${algorithm} limit`);
  }
  checkClient(limit.client, `${at}.client`, errors);
  const cost = limit.cost ?? ruleCost ?? 1;
  const costField = limit.cost !== undefined || ruleCost === undefined ? `${at}.cost` : 'cost';
  if (algorithm === 'token-bucket') {
    checkDuration(limit.period, `${at}.period`, errors);
    if (limit.capacity !== undefined) {
      checkBucketAdmits(
        limit.capacity,
        limit.maxDebt ?? limit.capacity,
        cost,
        { capacity: `${at}.capacity`, cost: costField, maxDebt: `${at}.maxDebt` },
        errors,
      );
    }
  } else if (algorithm === 'sliding-window') {
    checkDuration(limit.window, `${at}.window`, errors);
    if (limit.max !== undefined && cost > limit.max) {
      fail(errors, costField, `must not exceed ${at}.max, or no request could pass`);
    }
  } else {
    if (
      limit.max !== undefined &&
      !(Number.isInteger(limit.max) && limit.max >= 1 && limit.max <= MAX_CONCURRENCY)
    ) {
      fail(errors, `${at}.max`, `must be an integer from 1 to ${MAX_CONCURRENCY} for a concurrency limit`);
    }
  }
}

function checkLifecycle(input: RuleInput, errors: Errors): void {
  const charge = input.charge;
  if (charge !== undefined) {
    const needs = { header: 'header', duration: 'unitMs', bytes: 'unitBytes' } as const;
    for (const [from, key] of Object.entries(needs)) {
      if (charge.from === from && charge[key] === undefined) {
        fail(errors, `charge.${key}`, `is required when charge.from is "${from}"`);
      } else if (charge.from !== from && charge[key] !== undefined) {
        fail(errors, `charge.${key}`, `is only allowed when charge.from is "${from}"`);
      }
    }
    if (charge.header !== undefined && isPrototypeHeaderName(charge.header)) {
      fail(
        errors,
        'charge.header',
        'is not allowed as a header name (it names a property of every JavaScript object)',
      );
    }
    const charged =
      input.limits === undefined || input.limits.some((limit) => limit.algorithm !== 'concurrency');
    if (!charged) {
      fail(
        errors,
        'charge',
        'needs a token-bucket or sliding-window limit to charge (concurrency takes slots)',
      );
    }
  }
  if (input.refund !== undefined && input.limits !== undefined) {
    if (input.limits.every((limit) => limit.algorithm === 'concurrency')) {
      fail(
        errors,
        'refund',
        'needs a token-bucket or sliding-window limit to refund (concurrency takes slots)',
      );
    }
  }
}

/**
 * Checks what JSON Schema cannot say: which fields go together (`limit` or `limits` or `unlimited`,
 * each limit's fields by algorithm), `**` only as the final segment, no empty or dot segments, no
 * bidirectional controls, header names that are not object-prototype names, IPs and CIDRs, durations,
 * limits some request could pass. Run after schema validation; the
 * gateway runs it on every enabled rule of a snapshot too.
 */
export function checkRule(input: RuleInput): RuleFieldError[] {
  const errors: Errors = [];
  checkMatch(input.match, errors);
  const form = input.limits !== undefined ? 'limits' : input.limit !== undefined ? 'limit' : undefined;

  if (input.unlimited !== undefined && form !== undefined) {
    fail(errors, 'unlimited', `must not be set together with ${form}`);
  } else if (input.unlimited === true) {
    for (const key of ['client', 'cost', 'maxDebt', 'charge', 'refund', 'mode'] as const) {
      if (input[key] !== undefined) fail(errors, key, 'has no effect on an unlimited rule; remove it');
    }
  } else if (form === undefined) {
    fail(errors, 'limit', "is required: a rule needs 'limit', 'limits' or 'unlimited': true");
  }

  if (form === 'limits') {
    if (input.limit !== undefined) fail(errors, 'limit', 'must not be set together with limits');
    for (const key of ['client', 'maxDebt'] as const) {
      if (input[key] !== undefined) {
        fail(errors, key, 'must not be set together with limits (set it inside each limit)');
      }
    }
    const names = new Map<string, number>();
    input.limits!.forEach((limit, i) => {
      const first = names.get(limit.name);
      if (first !== undefined) {
        fail(
          errors,
          `limits.${i}.name`,
          `must be unique within the rule ("${limit.name}" is limits.${first} too)`,
        );
      } else names.set(limit.name, i);
      checkLimit(limit, i, input.cost, errors);
    });
  } else if (form === 'limit') {
    const limit = input.limit!;
    checkClient(input.client, 'client', errors);
    checkBucketAdmits(
      limit.capacity,
      input.maxDebt ?? limit.capacity,
      input.cost ?? 1,
      { capacity: 'limit.capacity', cost: 'cost', maxDebt: 'maxDebt' },
      errors,
    );
    checkDuration(limit.period, 'limit.period', errors);
  }
  if (input.unlimited !== true) checkLifecycle(input, errors);
  return dedupe(errors);
}

function dedupe(errors: RuleFieldError[]): RuleFieldError[] {
  const seen = new Set<string>();
  return errors.filter((e) => {
    const k = `${e.field}\0${e.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** Schema errors come several per field (a union reports each branch); the last one sums them up. */
function lastPerField(errors: RuleFieldError[]): RuleFieldError[] {
  const byField = new Map<string, RuleFieldError>();
  for (const e of errors) {
    byField.delete(e.field);
    byField.set(e.field, e);
  }
  return [...byField.values()];
}

const inputValidator = Compile(RuleInputSchema);
const ruleValidator = Compile(RuleSchema);

function pointerToField(instancePath: string): string {
  return instancePath.replace(/^\//, '').replaceAll('/', '.') || '(body)';
}

/** Validates an untrusted value as a rule input (schema, then `checkRule`). Used outside Fastify. */
export function validateRuleInput(
  value: unknown,
): { ok: true; value: RuleInput } | { ok: false; errors: RuleFieldError[] } {
  if (!inputValidator.Check(value)) {
    const errors = inputValidator.Errors(value).map((e) => {
      const params = e.params as { additionalProperties?: string[]; requiredProperties?: string[] };
      const extra = params.additionalProperties?.[0] ?? params.requiredProperties?.[0];
      const base = pointerToField(e.instancePath);
      const field = extra ? (base === '(body)' ? extra : `${base}.${extra}`) : base;
      let message = e.message;
      if (extra && !params.requiredProperties) {
        message = base === 'match.headers' ? 'is not a valid header name' : 'is not a known field';
      }
      return { field, message };
    });
    return { ok: false, errors: lastPerField(errors) };
  }
  const errors = checkRule(value);
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value };
}

/** True when a value has the full shape of a stored rule, either form (the gateway checks snapshots with it). */
export function isRule(value: unknown): value is Rule {
  return ruleValidator.Check(value);
}
