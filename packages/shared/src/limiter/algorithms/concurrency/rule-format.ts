/**
 * The concurrency limit in the rule format (docs/rules.md): `max`, an integer. It takes no cost: every
 * request holds one slot, whatever it costs.
 */
import Type from 'typebox';
import { ClientSchema, clientWords, fail, Tokens } from '../../../format/fields.js';
import type { LimitFormat } from '../algorithm.js';
import type { ConcurrencySpec } from './model.js';

/** Most concurrent requests a concurrency limit may allow. */
export const MAX_CONCURRENCY = 1_000_000;

/**
 * How long a compiled concurrency slot is held at most, ms: the default UPSTREAM_TIMEOUT_MS (30 s) + 5 s.
 * A gateway replaces it with its own `UPSTREAM_TIMEOUT_MS + 5 s` (docs/lifecycle.md: the taking gateway sets it).
 */
export const DEFAULT_SLOT_LEASE_MS = 35_000;

export const CONCURRENCY_FIELDS = {
  // a number here, not an integer: the flat input schema shares `max` with the sliding window, and
  // `check` says what a concurrency limit needs in words of its own
  max: Tokens('most requests in flight (an integer)'),
};

export const ConcurrencyLimitSchema = Type.Object(
  {
    name: Type.String(),
    client: ClientSchema,
    algorithm: Type.Literal('concurrency'),
    max: Type.Integer(),
  },
  { additionalProperties: false },
);

export const concurrencyFormat: LimitFormat<
  ConcurrencySpec,
  typeof CONCURRENCY_FIELDS,
  typeof ConcurrencyLimitSchema
> = {
  label: 'concurrency',
  fields: CONCURRENCY_FIELDS,
  required: ['max'],
  costless: { refused: 'a concurrency limit always takes one slot per request', inLifecycle: 'takes slots' },
  storedSchema: ConcurrencyLimitSchema,

  withDefaults: (input, client) => ({ name: input.name, client, algorithm: 'concurrency', max: input.max! }),

  check(input, { at }, errors) {
    const max = input.max;
    if (max !== undefined && !(Number.isInteger(max) && max >= 1 && max <= MAX_CONCURRENCY)) {
      fail(errors, `${at}.max`, `must be an integer from 1 to ${MAX_CONCURRENCY} for a concurrency limit`);
    }
  },

  compile: (limit) => ({ algorithm: 'concurrency', max: limit.max, leaseMs: DEFAULT_SLOT_LEASE_MS }),

  describe: (limit) => `${limit.max} at once ${clientWords(limit.client)}`,
};
