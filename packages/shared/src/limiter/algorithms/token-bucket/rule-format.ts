/**
 * The token bucket in the rule format (docs/rules.md): `capacity`, `refill`, `period`, `maxDebt`
 * (default capacity), and a cost of its own or the rule's. A format-1 rule (`limit`) is one of these,
 * named "" (rules/limits-of.ts).
 */
import Type from 'typebox';
import { parseDuration } from '../../../format/duration.js';
import {
  ClientSchema,
  checkDuration,
  clientWords,
  DURATION_WORDS,
  Duration,
  durationWords,
  fail,
  MAX_TOKENS,
  type RuleFieldError,
  Tokens,
} from '../../../format/fields.js';
import type { LimitFormat } from '../algorithm.js';
import type { TokenBucketSpec } from './model.js';

export const TOKEN_BUCKET_FIELDS = {
  capacity: Tokens('most tokens the bucket holds (the burst)'),
  refill: Tokens('tokens gained every `period`, continuously'),
  period: Duration(DURATION_WORDS),
  maxDebt: Type.Number({ minimum: 0, maximum: MAX_TOKENS, description: 'default capacity' }),
};

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

/** Where a bucket's numbers are written: in a `limits` item, or across a format-1 rule. */
export interface BucketFields {
  readonly capacity: string;
  readonly cost: string;
  readonly maxDebt: string;
}

/** A token bucket no request could ever pass is a mistake, not a policy: say so instead of answering 429 forever. */
export function checkBucketAdmits(
  capacity: number,
  maxDebt: number,
  cost: number,
  at: BucketFields,
  errors: RuleFieldError[],
): void {
  if (capacity < Math.min(cost, 1)) {
    fail(errors, at.capacity, 'must be at least 1 (or at least cost, when cost < 1)');
  } else if (cost > capacity + maxDebt) {
    fail(errors, at.cost, `must not exceed ${at.capacity} + ${at.maxDebt}, or no request could pass`);
  }
}

export const tokenBucketFormat: LimitFormat<
  TokenBucketSpec,
  typeof TOKEN_BUCKET_FIELDS,
  typeof TokenBucketLimitSchema
> = {
  label: 'token bucket',
  fields: TOKEN_BUCKET_FIELDS,
  required: ['capacity', 'refill', 'period'],
  storedSchema: TokenBucketLimitSchema,

  withDefaults: (input, client) => ({
    name: input.name,
    client,
    algorithm: 'token-bucket',
    capacity: input.capacity!,
    refill: input.refill!,
    period: input.period!,
    maxDebt: input.maxDebt ?? input.capacity!,
    ...(input.cost !== undefined ? { cost: input.cost } : {}),
  }),

  check(input, { at, cost, costField }, errors) {
    checkDuration(input.period, `${at}.period`, errors);
    if (input.capacity === undefined) return;
    const fields = { capacity: `${at}.capacity`, cost: costField, maxDebt: `${at}.maxDebt` };
    checkBucketAdmits(input.capacity, input.maxDebt ?? input.capacity, cost, fields, errors);
  },

  compile: (limit) => ({
    algorithm: 'token-bucket',
    capacity: limit.capacity,
    refill: limit.refill,
    periodMs: parseDuration(limit.period),
    maxDebt: limit.maxDebt,
  }),

  describe: (limit) =>
    `${limit.capacity} ${clientWords(limit.client)}, ${limit.refill} more every ${durationWords(limit.period)} (token bucket)`,
};
