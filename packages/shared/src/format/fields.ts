/**
 * The building blocks of the rule format that the rule schema (rules/schema.ts) and each algorithm's
 * own limit format (limiter/algorithms/<name>/rule-format.ts) share: token amounts, durations, the
 * client a limit counts by, and the field errors both report. It sits in neither folder: the rule
 * schema is built from the plug-ins (rules/ imports limiter/), so were these in rules/ the plug-ins
 * would import back and the two folders would be a loop (layers.test.ts forbids it).
 */
import Type, { type Static } from 'typebox';
import { DURATION_PATTERN, DurationError, MAX_DURATION_MS, parseDuration } from './duration.js';

/** An HTTP header field name (RFC 9110 token). */
export const HEADER_NAME_PATTERN = "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$";

/** Upper bound for capacity, refill, cost, max and maxDebt: keeps the arithmetic exact in doubles. */
export const MAX_TOKENS = 1e12;
/**
 * Lower bound for capacity, refill, cost and max: a thousandth of a token. Anything smaller is a typo or
 * a way to write a rule that never limits (`cost: 1e-300`), not a policy.
 */
export const MIN_TOKENS = 0.001;

/** An amount of tokens (or of cost) a rule writes. */
export const Tokens = (description: string) =>
  Type.Number({ minimum: MIN_TOKENS, maximum: MAX_TOKENS, description });

/** A duration a rule writes: a string like `"1s"` or an integer of milliseconds. */
export const Duration = (description: string) =>
  Type.Union(
    [Type.String({ pattern: DURATION_PATTERN }), Type.Integer({ minimum: 1, maximum: MAX_DURATION_MS })],
    { description },
  );
export const DURATION_WORDS = 'a duration like "500ms", "1s", "1m", "1h", "1d" or an integer of milliseconds';

/** A top-level claim name of a JWT: visible ASCII (namespaced claims such as `https://x.io/plan` included). */
export const CLAIM_NAME_PATTERN = '^[!-~]{1,128}$';

/** What a limit counts by: the client IP, a request header, a verified JWT claim, or everyone together. */
export const ClientSchema = Type.Object(
  {
    by: Type.Enum(['ip', 'header', 'global', 'jwt']),
    name: Type.Optional(
      Type.String({
        pattern: HEADER_NAME_PATTERN,
        description: 'header name, required when `by` is `header`',
      }),
    ),
    secret: Type.Optional(
      Type.Boolean({
        description:
          'with `by: "header"`: the value is a credential, keyed and shown only as `header:~<HMAC>` (default: true for authorization, proxy-authorization, cookie, x-api-key, api-key, x-auth-token)',
      }),
    ),
    claim: Type.Optional(
      Type.String({
        pattern: CLAIM_NAME_PATTERN,
        description: 'with `by: "jwt"`: the verified claim (string or number) to key by; default `sub`',
      }),
    ),
  },
  { additionalProperties: false },
);
export type Client = Static<typeof ClientSchema>;

/** A problem with one field; `field` is a dotted path such as `limit.period` or `limits.1.capacity`. */
export interface RuleFieldError {
  field: string;
  message: string;
}

/** Records a problem with `field`. */
export function fail(errors: RuleFieldError[], field: string, message: string): void {
  errors.push({ field, message });
}

/** The duration's milliseconds, or NaN with the problem recorded under `field` (NaN too when absent). */
export function checkDuration(
  value: string | number | undefined,
  field: string,
  errors: RuleFieldError[],
): number {
  if (value === undefined) return Number.NaN;
  try {
    return parseDuration(value);
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    fail(errors, field, err.message);
    return Number.NaN;
  }
}

/** A duration as written, for people: a number is milliseconds. */
export function durationWords(value: string | number): string {
  return typeof value === 'number' ? `${value}ms` : value;
}

/** Whose requests a limit counts, for people: `per x-api-key`, `per client IP`, `for all clients together`. */
export function clientWords(client: Client): string {
  if (client.by === 'header') return `per ${client.name}`;
  if (client.by === 'jwt') return `per verified ${client.claim ?? 'sub'}`;
  return client.by === 'ip' ? 'per client IP' : 'for all clients together';
}
