/**
 * A rule as stored: its writable fields as written (defaults filled in by `withDefaults`), in one
 * JSON value whose key order is fixed here. The key order is what the snapshot's bytes show (it is
 * serialised with `JSON.stringify`), so it must not depend on the order a client sent the keys in,
 * nor change for the rules of format v1, which have always come back in the order of docs/rules.md.
 */
import type { Rule, RuleFields } from '@sluice/shared';

/**
 * Which keys of an object come first, in this order; keys it does not name follow as they are.
 * Applied to an array, it orders each element.
 */
interface KeyOrder {
  keys: readonly string[];
  /** the order inside the value found under a key */
  nested?: Readonly<Record<string, KeyOrder>>;
}

const CLIENT: KeyOrder = { keys: ['by', 'name'] };

/** v1 keys in the order the API has always returned them, with the keys of format v2 among them. */
const DEFINITION: KeyOrder = {
  keys: [
    'name',
    'description',
    'match',
    'client',
    'limit',
    'limits',
    'unlimited',
    'cost',
    'charge',
    'refund',
    'maxDebt',
    'mode',
    'enabled',
    'shadow',
    'priority',
  ],
  nested: {
    match: { keys: ['path', 'methods', 'host', 'headers', 'clientIps', 'notClientIps'] },
    client: CLIENT,
    limit: { keys: ['capacity', 'refill', 'period'] },
    limits: {
      keys: [
        'name',
        'client',
        'algorithm',
        'capacity',
        'refill',
        'period',
        'maxDebt',
        'max',
        'window',
        'cost',
      ],
      nested: { client: CLIENT },
    },
  },
};

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A copy of `value` with its keys in `order`. `Object.fromEntries` defines properties (it never
 * assigns), so even a `__proto__` key would stay an ordinary key.
 */
function ordered(value: unknown, order: KeyOrder | undefined): unknown {
  if (order === undefined) return value;
  if (Array.isArray(value)) return value.map((item) => ordered(item, order));
  if (!isPlainObject(value)) return value;
  const named = order.keys.filter((key) => Object.hasOwn(value, key) && value[key] !== undefined);
  const others = Object.keys(value).filter((key) => !order.keys.includes(key) && value[key] !== undefined);
  return Object.fromEntries(
    [...named, ...others].map((key) => [key, ordered(value[key], order.nested?.[key])]),
  );
}

/** What the `definition` column holds for these fields. */
export function ruleDefinition(fields: RuleFields): RuleFields {
  return ordered(fields, DEFINITION) as RuleFields;
}

/** The rule as the API returns it: server fields around the definition (id first, then as stored). */
export function ruleOf(
  definition: RuleFields,
  server: { id: string; version: number; createdAt: string; updatedAt: string },
): Rule {
  return {
    id: server.id,
    ...definition,
    version: server.version,
    createdAt: server.createdAt,
    updatedAt: server.updatedAt,
  } as Rule;
}

/**
 * A rule read back from history in the same key order as `ruleOf` gives: entries written before
 * the history kept key order (the column was jsonb) come back in jsonb's order otherwise.
 */
export function orderedRule(rule: Rule): Rule {
  const { id, version, createdAt, updatedAt, ...definition } = rule;
  return ruleOf(ruleDefinition(definition as RuleFields), { id, version, createdAt, updatedAt });
}
