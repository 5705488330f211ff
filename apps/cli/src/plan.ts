/**
 * What `rules apply` would do: a pure diff, by rule name, of the rules a file wants against the rules
 * the API has. Comparison is on the normalised writable fields (defaults filled in, so a file that
 * leaves `cost` out equals a stored `cost: 1`), which makes a second apply of the same file a no-op.
 * Works for every form of rule: `limit` (format 1), `limits` (format 2) and `unlimited`.
 */
import { isIP } from 'node:net';
import {
  algorithmChangeNotice,
  algorithmChanges,
  algorithmNamed,
  type Client,
  isSecretHeader,
  parseDuration,
  type Rule,
  type RuleFields,
  type RuleFieldsV2,
  type RuleInput,
  type RuleLimit,
  ruleSummary,
  withDefaults,
} from '@sluice/shared';

export type PlanStep =
  /** in the file, not on the server */
  | { action: 'create'; name: string; input: RuleInput }
  /** on both, fields differ: PUT guarded by `If-Match: "<version>"` */
  | {
      action: 'update';
      name: string;
      id: string;
      version: number;
      input: RuleInput;
      changedFields: string[];
      /** what the change does that its fields do not show (a limit's counters starting afresh) */
      notices: string[];
    }
  /** on both, equal */
  | { action: 'unchanged'; name: string; id: string; version: number }
  /** on the server only, with `--prune`: DELETE guarded by `If-Match` */
  | { action: 'delete'; name: string; id: string; version: number }
  /** on the server only, without `--prune`; or differing but left alone by `createOnly` */
  | { action: 'keep'; name: string; id: string; version: number; reason: 'not-in-file' | 'create-only' };

export type PlanAction = PlanStep['action'];

export interface PlanOptions {
  /** delete rules the file does not name */
  prune?: boolean;
  /** only create missing rules; leave existing ones as they are (the demo seeds this way) */
  createOnly?: boolean;
}

export interface Plan {
  steps: PlanStep[];
  /** count per action */
  counts: Record<PlanAction, number>;
  /** true when applying would write something */
  hasChanges: boolean;
}

/** The writable fields of a stored rule (what a rules file can say about it). */
export function writableFields(rule: Rule): RuleFields {
  const { id: _id, version: _version, createdAt: _createdAt, updatedAt: _updatedAt, ...fields } = rule;
  return fields;
}

/** A field's meaning, flattened to something `===` can compare. */
type Meaning = string | number | boolean | undefined;

/**
 * Flattens a rule to `field → meaning`, comparing meaning, not spelling: `"60s"` equals `"1m"` and
 * `60000`, method order and `[]` vs absent do not matter, IP lists are sets, header names are lower
 * case (`withDefaults` does that), `caseInsensitive: false` equals absent, and a limit's cost is the one
 * it really takes (its own, else the rule's). Limits are keyed by name, so `limits.daily.window` names
 * one limit's field whatever its position.
 */
function comparable(fields: RuleFields): Record<string, Meaning> {
  const methods = [...new Set(fields.match.methods ?? [])].sort();
  const out: Record<string, Meaning> = {
    description: fields.description ?? undefined,
    'match.path': fields.match.path,
    'match.methods': methods.length === 0 ? undefined : methods.join(','),
    'match.host': fields.match.host ?? undefined,
  };
  for (const [name, value] of Object.entries(fields.match.headers ?? {})) {
    out[`match.headers.${name.toLowerCase()}`] = value;
  }
  // a list of wanted values is a set: its order does not matter
  for (const [name, value] of Object.entries(fields.match.claims ?? {})) {
    out[`match.claims.${name}`] = JSON.stringify(
      Array.isArray(value) ? [...new Set(value.map((v) => JSON.stringify(v)))].sort() : value,
    );
  }
  out['match.authenticated'] = fields.match.authenticated;
  Object.assign(out, {
    'match.clientIps': ipSet(fields.match.clientIps),
    'match.notClientIps': ipSet(fields.match.notClientIps),
    'match.caseInsensitive': fields.match.caseInsensitive === true ? true : undefined,
    enabled: fields.enabled,
    shadow: fields.shadow,
    priority: fields.priority,
  });
  if ('unlimited' in fields) return out;
  // not enforced yet (the API refuses them), but a stored rule may carry them one day: never ignore them
  out.charge = fields.charge === undefined ? undefined : JSON.stringify(fields.charge);
  out.refund = fields.refund === undefined ? undefined : JSON.stringify(fields.refund);
  out.mode = fields.mode === 'lease' ? 'lease' : undefined;
  if ('limit' in fields) {
    out.client = clientMeaning(fields.client);
    out['limit.capacity'] = fields.limit.capacity;
    out['limit.refill'] = fields.limit.refill;
    out['limit.period'] = durationMs(fields.limit.period);
    out.cost = fields.cost;
    out.maxDebt = fields.maxDebt;
    return out;
  }
  for (const limit of fields.limits) {
    const at = `limits.${limit.name}`;
    out[`${at}.client`] = clientMeaning(limit.client);
    out[`${at}.algorithm`] = limit.algorithm;
    // the limit's own fields, as its algorithm lists them; a string there is always a duration
    const format = algorithmNamed(limit.algorithm)?.rule;
    if (format === undefined) continue; // the server never holds one; its fields mean nothing here
    const written = limit as Record<string, unknown>;
    for (const field of Object.keys(format.fields)) {
      const value = written[field];
      out[`${at}.${field}`] = typeof value === 'string' ? durationMs(value) : (value as Meaning);
    }
    if (format.costless === undefined) {
      out[`${at}.cost`] = ('cost' in limit ? limit.cost : undefined) ?? fields.cost;
    }
  }
  return out;
}

/** What a client keys by: a header (and whether its value is a credential, written or by default), a claim. */
function clientMeaning(client: Client): string {
  if (client.by === 'header') {
    const name = (client.name ?? '').toLowerCase();
    return `header:${name}${isSecretHeader(name, client.secret) ? ':secret' : ''}`;
  }
  if (client.by === 'jwt') return `jwt:${client.claim ?? 'sub'}`;
  return client.by;
}

/** An IP list as a set: order, repeats and the spelling of a single address (`/32`, `/128`, hex case) do not matter. */
function ipSet(values: readonly string[] | undefined): string | undefined {
  if (values === undefined) return undefined;
  const nets = values.map((value) => {
    const lower = value.toLowerCase();
    const [address = lower, prefix] = lower.split('/');
    const family = isIP(address);
    const full = family === 4 ? '32' : family === 6 ? '128' : undefined;
    return prefix === undefined || prefix === full ? address : `${address}/${prefix}`;
  });
  return [...new Set(nets)].sort().join(',');
}

function durationMs(value: string | number): number | string {
  try {
    return parseDuration(value);
  } catch {
    return String(value); // the server should never hold one; compare literally rather than fail
  }
}

/** Which form a rule has: its limits' key, or `unlimited`. */
function formOf(fields: RuleFields): 'limit' | 'limits' | 'unlimited' {
  return 'unlimited' in fields ? 'unlimited' : 'limit' in fields ? 'limit' : 'limits';
}

/**
 * What changed about the limits of two format-2 rules, by name: `limits.daily (added)`,
 * `limits.burst (removed)`, `limits.per-day (renamed from daily)` (a removed and an added limit that
 * are equal but for their name: its counts start afresh), `limits (order)` (headers list limits in
 * the rule's order, and the 429 names the first that denies).
 */
function limitSetChanges(want: RuleFieldsV2, have: RuleFieldsV2): { changes: string[]; whole: Set<string> } {
  const wantNames = want.limits.map((l) => l.name);
  const haveNames = have.limits.map((l) => l.name);
  const added = want.limits.filter((l) => !haveNames.includes(l.name));
  const removed = have.limits.filter((l) => !wantNames.includes(l.name));
  const changes: string[] = [];
  // names whose limit is reported as a whole; their fields are not listed one by one
  const whole = new Set([...added, ...removed].map((l) => l.name));
  for (const limit of added) {
    const meaning = limitMeaning(want, limit);
    const i = removed.findIndex((old) => limitMeaning(have, old) === meaning);
    if (i === -1) {
      changes.push(`limits.${limit.name} (added)`);
      continue;
    }
    changes.push(`limits.${limit.name} (renamed from ${removed[i]!.name})`);
    removed.splice(i, 1);
  }
  for (const limit of removed) changes.push(`limits.${limit.name} (removed)`);
  const kept = wantNames.filter((n) => haveNames.includes(n));
  if (kept.join('\0') !== haveNames.filter((n) => wantNames.includes(n)).join('\0')) {
    changes.push('limits (order)');
  }
  return { changes, whole };
}

/** One limit's meaning without its name, to recognise a rename. */
function limitMeaning(fields: RuleFieldsV2, limit: RuleLimit): string {
  const flat = comparable({ ...fields, limits: [{ ...limit, name: '' }] });
  return JSON.stringify(Object.entries(flat).filter(([key]) => key.startsWith('limits..')));
}

/**
 * Names of the fields whose meaning differs, e.g. `['limit.capacity', 'shadow']`,
 * `['limits.burst.capacity', 'limits.daily (added)', 'match.headers.x-tier']`; empty when equal.
 */
export function changedFields(desired: RuleInput, current: Rule | RuleInput): string[] {
  const wantFields = withDefaults(desired);
  const haveFields = 'id' in current ? writableFields(current) : withDefaults(current);
  const want = comparable(wantFields);
  const have = comparable(haveFields);
  const wantForm = formOf(wantFields);
  const haveForm = formOf(haveFields);
  const sameForm = wantForm === haveForm;
  const { changes: setChanges, whole } =
    'limits' in wantFields && 'limits' in haveFields
      ? limitSetChanges(wantFields, haveFields)
      : { changes: [], whole: new Set<string>() };
  const formSpecific = /^(client|limit\.|limits\.|cost$|maxDebt$)/;
  const fields = [...new Set([...Object.keys(want), ...Object.keys(have)])].filter((field) => {
    if (want[field] === have[field]) return false;
    if (!sameForm && formSpecific.test(field)) return false;
    const limitName = /^limits\.([^.]+)\./.exec(field)?.[1];
    return limitName === undefined || !whole.has(limitName);
  });
  const formChange = sameForm ? [] : [`${wantForm} (was ${haveForm})`];
  return [...formChange, ...fields, ...setChanges];
}

export function planChanges(
  desired: readonly RuleInput[],
  current: readonly Rule[],
  options: PlanOptions = {},
): Plan {
  const currentByName = new Map(current.map((rule) => [rule.name, rule]));
  const desiredNames = new Set(desired.map((rule) => rule.name));
  const steps: PlanStep[] = [];
  for (const input of desired) {
    const existing = currentByName.get(input.name);
    if (!existing) {
      steps.push({ action: 'create', name: input.name, input });
      continue;
    }
    const ref = { name: input.name, id: existing.id, version: existing.version };
    const changed = changedFields(input, existing);
    if (changed.length === 0) steps.push({ action: 'unchanged', ...ref });
    else if (options.createOnly) steps.push({ action: 'keep', ...ref, reason: 'create-only' });
    else {
      const notices = algorithmChanges(writableFields(existing), withDefaults(input)).map(
        algorithmChangeNotice,
      );
      steps.push({ action: 'update', ...ref, input, changedFields: changed, notices });
    }
  }
  for (const rule of current) {
    if (desiredNames.has(rule.name)) continue;
    const ref = { name: rule.name, id: rule.id, version: rule.version };
    steps.push(
      options.prune && !options.createOnly
        ? { action: 'delete', ...ref }
        : { action: 'keep', ...ref, reason: 'not-in-file' },
    );
  }
  steps.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const counts: Record<PlanAction, number> = { create: 0, update: 0, unchanged: 0, delete: 0, keep: 0 };
  for (const step of steps) counts[step.action] += 1;
  return { steps, counts, hasChanges: counts.create + counts.update + counts.delete > 0 };
}

const SYMBOL: Record<PlanAction, string> = {
  create: '+',
  update: '~',
  delete: '-',
  unchanged: '=',
  keep: '·',
};

/** Where a rule's name starts in a plan line (`  + create    `): its limits in words are indented to it. */
const NAME_COLUMN = 14;

/** What a created or updated rule will limit, one line per limit (the words the console shows too). */
function limitLines(input: RuleInput): string[] {
  return ruleSummary(withDefaults(input)).map((line) => `${' '.repeat(NAME_COLUMN)}${line}`);
}

/**
 * Human-readable plan, one line per rule (followed, for a rule to create or update, by what it will
 * limit), then a summary line.
 */
export function formatPlan(plan: Plan): string {
  const width = Math.max(0, ...plan.steps.map((s) => s.name.length));
  const lines = plan.steps.flatMap((step) => {
    const head = `  ${SYMBOL[step.action]} ${step.action.padEnd(9)} ${step.name.padEnd(width)}`;
    switch (step.action) {
      case 'create':
        return [head.trimEnd(), ...limitLines(step.input)];
      case 'update':
        return [
          `${head}  (${step.changedFields.join(', ')})`,
          ...step.notices.map((notice) => `${' '.repeat(NAME_COLUMN - 2)}! ${notice}`),
          ...limitLines(step.input),
        ];
      case 'keep':
        return step.reason === 'not-in-file'
          ? `${head}  (not in the file; --prune deletes it)`
          : `${head}  (differs from the file; left as it is)`;
      default:
        return head.trimEnd();
    }
  });
  const { create, update, delete: del, unchanged, keep } = plan.counts;
  const summary = `${create} to create, ${update} to update, ${del} to delete, ${unchanged} unchanged${keep ? `, ${keep} kept` : ''}.`;
  return [...lines, summary].join('\n');
}
