/**
 * The rule schema (SPEC §2): one TypeBox definition gives the JSON Schema the rules API validates
 * bodies with, the TypeScript types, and the checks the gateway and the rules-file CLI run.
 */
import Type, { type Static } from 'typebox';
import Compile from 'typebox/compile';
import { DURATION_PATTERN, DurationError, MAX_DURATION_MS, parseDuration } from './duration.js';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

export const RULE_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';
/** Starts with `/`; no `?`, `#`, `%`, `\`, whitespace or control characters (C0, DEL, C1). Segment rules are in `checkRule`. */
export const RULE_PATH_PATTERN = '^/[^?#%\\\\\\s\\u0000-\\u001f\\u007f-\\u009f]*$';
/** A host name or bracketed IPv6 literal, without port. */
export const RULE_HOST_PATTERN =
  '^(\\[[0-9A-Fa-f:.]{2,45}\\]|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)$';
/** An HTTP header field name (RFC 9110 token). */
export const HEADER_NAME_PATTERN = "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$";

/** Upper bound for capacity, refill, cost and maxDebt: keeps the arithmetic exact in doubles. */
export const MAX_TOKENS = 1e12;

const Positive = (description: string) =>
  Type.Number({ exclusiveMinimum: 0, maximum: MAX_TOKENS, description });

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
        description: 'absent or empty: every method',
      }),
    ),
    host: Type.Optional(
      Type.String({
        pattern: RULE_HOST_PATTERN,
        maxLength: 255,
        description: 'exact host, case-insensitive',
      }),
    ),
  },
  { additionalProperties: false },
);

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

export const LimitSchema = Type.Object(
  {
    capacity: Positive('most tokens the bucket holds (the burst)'),
    refill: Positive('tokens gained every `period`, continuously'),
    period: Type.Union(
      [Type.String({ pattern: DURATION_PATTERN }), Type.Integer({ minimum: 1, maximum: MAX_DURATION_MS })],
      { description: 'a duration like "500ms", "1s", "1m", "1h", "1d" or an integer of milliseconds' },
    ),
  },
  { additionalProperties: false },
);

/** What a client sends on POST and PUT. */
export const RuleInputSchema = Type.Object(
  {
    name: Type.String({ pattern: RULE_NAME_PATTERN, maxLength: 64 }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
    match: RuleMatchSchema,
    client: Type.Optional(ClientSchema),
    limit: LimitSchema,
    cost: Type.Optional(Positive('tokens one request takes; default 1')),
    maxDebt: Type.Optional(
      Type.Number({ minimum: 0, maximum: MAX_TOKENS, description: 'default: capacity' }),
    ),
    enabled: Type.Optional(Type.Boolean()),
    shadow: Type.Optional(Type.Boolean()),
    priority: Type.Optional(Type.Integer({ minimum: -1_000_000, maximum: 1_000_000 })),
  },
  { additionalProperties: false, $id: 'RuleInput' },
);
export type RuleInput = Static<typeof RuleInputSchema>;

/** A rule as the API returns it: every default filled in, plus the server's fields. */
export const RuleSchema = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    description: Type.Optional(Type.String()),
    match: RuleMatchSchema,
    client: ClientSchema,
    limit: LimitSchema,
    cost: Type.Number(),
    maxDebt: Type.Number(),
    enabled: Type.Boolean(),
    shadow: Type.Boolean(),
    priority: Type.Integer(),
    version: Type.Integer({ minimum: 1 }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false, $id: 'Rule' },
);
export type Rule = Static<typeof RuleSchema>;

/** The writable fields with defaults applied: what the rules API stores. */
export type RuleFields = Omit<Rule, 'id' | 'version' | 'createdAt' | 'updatedAt'>;

/** A problem with one field; `field` is a JSON pointer-ish dotted path such as `limit.period`. */
export interface RuleFieldError {
  field: string;
  message: string;
}

/** Fills in SPEC §2 defaults. A PUT goes through here too, so an omitted `maxDebt` follows `capacity`. */
export function withDefaults(input: RuleInput): RuleFields {
  const client =
    input.client?.by === 'header'
      ? { by: 'header' as const, name: (input.client.name ?? '').toLowerCase() }
      : { by: input.client?.by ?? ('ip' as const) };
  const match: RuleFields['match'] = { path: input.match.path };
  if (input.match.methods !== undefined) match.methods = input.match.methods;
  if (input.match.host !== undefined) match.host = input.match.host.toLowerCase();
  const rule: RuleFields = {
    name: input.name,
    match,
    client,
    limit: { ...input.limit },
    cost: input.cost ?? 1,
    maxDebt: input.maxDebt ?? input.limit.capacity,
    enabled: input.enabled ?? true,
    shadow: input.shadow ?? false,
    priority: input.priority ?? 0,
  };
  if (input.description !== undefined) rule.description = input.description;
  return rule;
}

/**
 * Checks what JSON Schema cannot say: `**` only as the final segment, no empty or dot segments,
 * a header name when `client.by` is `header`, a period within range. Run after schema validation.
 */
export function checkRule(input: RuleInput): RuleFieldError[] {
  const errors: RuleFieldError[] = [];
  const segments = input.match.path.split('/').slice(1);
  // a single trailing slash is allowed and means the same as none (see pathSegments)
  if (segments.length > 1 && segments[segments.length - 1] === '') segments.pop();
  segments.forEach((segment, i) => {
    if (segment === '' && input.match.path !== '/') {
      errors.push({ field: 'match.path', message: 'must not contain empty segments (`//`)' });
    } else if (segment === '.' || segment === '..') {
      errors.push({ field: 'match.path', message: 'must not contain `.` or `..` segments' });
    } else if (segment === '**' && i !== segments.length - 1) {
      errors.push({ field: 'match.path', message: '`**` is only allowed as the final segment' });
    }
  });
  if (input.client?.by === 'header' && !input.client.name) {
    errors.push({ field: 'client.name', message: 'is required when client.by is "header"' });
  }
  if (input.client && input.client.by !== 'header' && input.client.name !== undefined) {
    errors.push({ field: 'client.name', message: 'is only allowed when client.by is "header"' });
  }
  // a rule no request could ever pass is a mistake, not a policy: say so instead of answering 429 forever
  const cost = input.cost ?? 1;
  const maxDebt = input.maxDebt ?? input.limit.capacity;
  if (input.limit.capacity < Math.min(cost, 1)) {
    errors.push({ field: 'limit.capacity', message: 'must be at least 1 (or at least cost, when cost < 1)' });
  } else if (cost > input.limit.capacity + maxDebt) {
    errors.push({
      field: 'cost',
      message: 'must not exceed limit.capacity + maxDebt, or no request could pass',
    });
  }
  try {
    parseDuration(input.limit.period);
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    errors.push({ field: 'limit.period', message: err.message });
  }
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
      const message = extra && !params.requiredProperties ? 'is not a known field' : e.message;
      return { field, message };
    });
    return { ok: false, errors: lastPerField(errors) };
  }
  const errors = checkRule(value);
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value };
}

/** True when a value has the full shape of a stored rule (the gateway checks snapshots with it). */
export function isRule(value: unknown): value is Rule {
  return ruleValidator.Check(value);
}
