/**
 * What `rules apply` would do: a pure diff, by rule name, of the rules a file wants against the rules
 * the API has. Comparison is on the normalised writable fields (defaults filled in, so a file that
 * leaves `cost` out equals a stored `cost: 1`), which makes a second apply of the same file a no-op.
 */
import { parseDuration, type Rule, type RuleFields, type RuleInput, withDefaults } from '@sluice/shared';

export type PlanStep =
  /** in the file, not on the server */
  | { action: 'create'; name: string; input: RuleInput }
  /** on both, fields differ: PUT guarded by `If-Match: "<version>"` */
  | { action: 'update'; name: string; id: string; version: number; input: RuleInput; changedFields: string[] }
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

/** The writable fields of a stored rule, as a rule input. */
export function writableFields(rule: Rule): RuleInput {
  const { id: _id, version: _version, createdAt: _createdAt, updatedAt: _updatedAt, ...fields } = rule;
  return fields;
}

/** Compares meaning, not spelling: `"60s"` equals `"1m"`, method order and `[]` vs absent do not matter. */
function comparable(fields: RuleFields): Record<string, unknown> {
  const methods = [...new Set(fields.match.methods ?? [])].sort();
  return {
    description: fields.description ?? undefined,
    'match.path': fields.match.path,
    'match.methods': methods.length === 0 ? undefined : methods.join(','),
    'match.host': fields.match.host ?? undefined,
    client: fields.client.by === 'header' ? `header:${fields.client.name}` : fields.client.by,
    'limit.capacity': fields.limit.capacity,
    'limit.refill': fields.limit.refill,
    'limit.period': periodMs(fields.limit.period),
    cost: fields.cost,
    maxDebt: fields.maxDebt,
    enabled: fields.enabled,
    shadow: fields.shadow,
    priority: fields.priority,
  };
}

function periodMs(period: string | number): number | string {
  try {
    return parseDuration(period);
  } catch {
    return String(period); // the server should never hold one; compare literally rather than fail
  }
}

/** Names of the fields whose meaning differs, e.g. `['limit.capacity', 'shadow']`; empty when equal. */
export function changedFields(desired: RuleInput, current: Rule | RuleInput): string[] {
  const want = comparable(withDefaults(desired));
  const have = comparable(withDefaults('id' in current ? writableFields(current as Rule) : current));
  return Object.keys(want).filter((field) => want[field] !== have[field]);
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
    else steps.push({ action: 'update', ...ref, input, changedFields: changed });
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

/** Human-readable plan, one line per rule, then a summary line. */
export function formatPlan(plan: Plan): string {
  const width = Math.max(0, ...plan.steps.map((s) => s.name.length));
  const lines = plan.steps.map((step) => {
    const head = `  ${SYMBOL[step.action]} ${step.action.padEnd(9)} ${step.name.padEnd(width)}`;
    switch (step.action) {
      case 'update':
        return `${head}  (${step.changedFields.join(', ')})`;
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
