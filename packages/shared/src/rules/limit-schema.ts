/**
 * The schemas of one named limit of a format-2 rule, built from the algorithm registry (so that
 * registering an algorithm is what adds its limit to the rule format, with no edit here):
 *
 * - `RuleLimitInputSchema`, a limit as written: one flat object with every algorithm's fields optional
 *   (a bad body then gets an error naming its field, not "must match one of the allowed forms"); which
 *   fields go with which algorithm is `checkRule`'s job (check.ts). A field two algorithms share (`max`)
 *   is one schema whose description says what it means to each;
 * - `RuleLimitSchema`, a stored limit: the precise union of every algorithm's stored schema.
 *
 * Their TypeScript types are derived from the plug-ins' own types, so they are as precise as the plug-ins.
 */
import Type, {
  type Static,
  type TEnum,
  type TObject,
  type TOptional,
  type TString,
  type TUnion,
} from 'typebox';
import { Memory } from 'typebox/system';
import { ClientSchema, Tokens } from '../format/fields.js';
import type { Algorithm, LimitFields } from '../limiter/algorithms/algorithm.js';
import {
  ALGORITHM_NAMES,
  ALGORITHMS,
  type AlgorithmName,
  DEFAULT_ALGORITHM,
  type RegisteredAlgorithm,
} from '../limiter/algorithms/index.js';

export const LIMIT_NAME_PATTERN = '^[a-z0-9][a-z0-9_-]{0,31}$';

/** The algorithms a limit may name, in the registry's order. */
export const LIMIT_ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
export type LimitAlgorithmName = AlgorithmName;

// biome-ignore lint/suspicious/noExplicitAny: only the fields' type is asked for
type FieldsOf<A> = A extends Algorithm<any, any, infer Fields, any> ? Fields : never;
// biome-ignore lint/suspicious/noExplicitAny: only the stored schema's type is asked for
type StoredOf<A> = A extends Algorithm<any, any, any, infer Stored> ? Stored : never;
type Intersection<U> = (U extends unknown ? (u: U) => void : never) extends (i: infer I) => void ? I : never;

/** Every algorithm's fields, each optional in the flat input. */
type MergedFields = {
  [K in keyof Intersection<FieldsOf<RegisteredAlgorithm>>]: TOptional<
    Intersection<FieldsOf<RegisteredAlgorithm>>[K]
  >;
};
type LimitInputProperties = {
  name: TString;
  client: TOptional<typeof ClientSchema>;
  algorithm: TOptional<TEnum<AlgorithmName[]>>;
  cost: TOptional<ReturnType<typeof Tokens>>;
} & MergedFields;

/** What a schema says without its description: two algorithms sharing a field must agree on it. */
function meaning(schema: object): string {
  return JSON.stringify({ ...schema, description: undefined });
}

/** Every algorithm's fields in registry order, a shared field once, described as `<label>: …; <label>: …`. */
function mergedFields(): Record<string, TOptional<LimitFields[string]>> {
  const byField = new Map<string, { schema: LimitFields[string]; words: string[] }>();
  for (const name of ALGORITHM_NAMES) {
    const format = ALGORITHMS[name].rule;
    for (const [field, schema] of Object.entries(format.fields as LimitFields)) {
      const words = `${format.label}: ${(schema as { description?: string }).description ?? ''}`;
      const seen = byField.get(field);
      if (seen === undefined) byField.set(field, { schema, words: [words] });
      else if (meaning(seen.schema) !== meaning(schema)) {
        throw new TypeError(
          `algorithms disagree on the limit field "${field}": one flat schema cannot say both`,
        );
      } else seen.words.push(words);
    }
  }
  return Object.fromEntries(
    [...byField].map(([field, { schema, words }]) => [
      field,
      Type.Optional(Memory.Update(schema, {}, { description: words.join('; ') }) as LimitFields[string]),
    ]),
  );
}

/** The algorithms a limit cannot take a cost from (`cost` is refused there). */
const costless = ALGORITHM_NAMES.filter((name) => ALGORITHMS[name].rule.costless !== undefined);

/** One named limit of a format-2 rule as written: which fields go with which algorithm is `checkRule`'s job. */
export const RuleLimitInputSchema = Type.Object(
  {
    name: Type.String({ pattern: LIMIT_NAME_PATTERN, description: 'unique within the rule' }),
    client: Type.Optional(ClientSchema),
    algorithm: Type.Optional(
      Type.Enum([...ALGORITHM_NAMES], { description: `default "${DEFAULT_ALGORITHM}"` }),
    ),
    ...mergedFields(),
    cost: Type.Optional(
      Tokens(
        `overrides the rule's cost for this limit${costless.length > 0 ? ` (not for ${costless.join(', ')})` : ''}`,
      ),
    ),
  },
  { additionalProperties: false },
) as unknown as TObject<LimitInputProperties>;
export type RuleLimitInput = Static<typeof RuleLimitInputSchema>;

/** One limit of a stored format-2 rule: `client` and `algorithm` (and a token bucket's `maxDebt`) filled in. */
// typed as a union of one member that is every algorithm's stored schema: TypeBox derives the same
// static type from it as from the tuple, which TypeScript cannot build from the registry's keys
export const RuleLimitSchema = Type.Union(
  ALGORITHM_NAMES.map((name) => ALGORITHMS[name].rule.storedSchema),
) as unknown as TUnion<[StoredOf<RegisteredAlgorithm>]>;
export type RuleLimit = Static<typeof RuleLimitSchema>;
