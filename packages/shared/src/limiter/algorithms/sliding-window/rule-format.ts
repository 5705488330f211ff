/** The sliding window in the rule format (docs/rules.md): `max`, `window`, and a cost of its own or the rule's. */
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
  Tokens,
} from '../../../format/fields.js';
import type { LimitFormat } from '../algorithm.js';
import type { SlidingWindowSpec } from './model.js';

export const SLIDING_WINDOW_FIELDS = {
  max: Tokens('most cost per window'),
  window: Duration(DURATION_WORDS),
};

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

export const slidingWindowFormat: LimitFormat<
  SlidingWindowSpec,
  typeof SLIDING_WINDOW_FIELDS,
  typeof SlidingWindowLimitSchema
> = {
  label: 'sliding window',
  fields: SLIDING_WINDOW_FIELDS,
  required: ['max', 'window'],
  storedSchema: SlidingWindowLimitSchema,

  withDefaults: (input, client) => ({
    name: input.name,
    client,
    algorithm: 'sliding-window',
    max: input.max!,
    window: input.window!,
    ...(input.cost !== undefined ? { cost: input.cost } : {}),
  }),

  check(input, { at, cost, costField }, errors) {
    checkDuration(input.window, `${at}.window`, errors);
    // a window no request could pass is a mistake, not a policy
    if (input.max !== undefined && cost > input.max) {
      fail(errors, costField, `must not exceed ${at}.max, or no request could pass`);
    }
  },

  compile: (limit) => ({
    algorithm: 'sliding-window',
    max: limit.max,
    windowMs: parseDuration(limit.window),
  }),

  describe: (limit) =>
    `${limit.max} ${clientWords(limit.client)} in any ${durationWords(limit.window)} (sliding window)`,
};
