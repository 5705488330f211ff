/**
 * Carries out a plan against the rules API. Every update and delete is guarded by the version the
 * plan saw (`If-Match`), so a rule someone changed in between is reported as a conflict and left as
 * they made it, never overwritten. One conflict does not stop the other steps; an unreachable API does.
 */
import type { Rule, RuleInput } from '@sluice/shared';
import { type RulesApiClient, RulesApiError } from './client.js';
import { type Plan, type PlanOptions, type PlanStep, planChanges } from './plan.js';

export type StepOutcome =
  | { step: PlanStep; status: 'done'; rule?: Rule }
  /** someone else changed the rule (or its name) since the plan was made */
  | { step: PlanStep; status: 'conflict'; message: string }
  | { step: PlanStep; status: 'failed'; message: string; error: unknown };

export interface ApplyResult {
  plan: Plan;
  outcomes: StepOutcome[];
  conflicts: number;
  failures: number;
}

/** Order of writes: updates first, then creates, prune last, so protection is removed last. */
const ORDER = { update: 0, create: 1, delete: 2, unchanged: 3, keep: 3 } as const;

export async function executePlan(
  client: RulesApiClient,
  plan: Plan,
  onOutcome: (outcome: StepOutcome) => void = () => {},
): Promise<ApplyResult> {
  const writes = plan.steps
    .filter((s) => s.action === 'create' || s.action === 'update' || s.action === 'delete')
    .sort((a, b) => ORDER[a.action] - ORDER[b.action]);
  const outcomes: StepOutcome[] = [];
  for (const step of writes) {
    const outcome = await executeStep(client, step);
    outcomes.push(outcome);
    onOutcome(outcome);
    if (outcome.status === 'failed' && (outcome.error as RulesApiError).code === 'UNREACHABLE') break;
  }
  return {
    plan,
    outcomes,
    conflicts: outcomes.filter((o) => o.status === 'conflict').length,
    failures: outcomes.filter((o) => o.status === 'failed').length,
  };
}

async function executeStep(client: RulesApiClient, step: PlanStep): Promise<StepOutcome> {
  try {
    switch (step.action) {
      case 'create':
        return { step, status: 'done', rule: await client.createRule(step.input) };
      case 'update':
        return { step, status: 'done', rule: await client.replaceRule(step.id, step.input, step.version) };
      case 'delete':
        await client.deleteRule(step.id, step.version);
        return { step, status: 'done' };
      default:
        return { step, status: 'done' };
    }
  } catch (error) {
    if (!(error instanceof RulesApiError)) throw error;
    const conflict = await describeConflict(client, step, error);
    if (conflict !== undefined) return { step, status: 'conflict', message: conflict };
    return { step, status: 'failed', message: error.message, error };
  }
}

/** A message for a write that lost a race, or undefined when the error is not a race. */
async function describeConflict(
  client: RulesApiClient,
  step: PlanStep,
  error: RulesApiError,
): Promise<string | undefined> {
  if (step.action === 'create' && error.code === 'NAME_TAKEN') {
    return `a rule named "${step.name}" was created by someone else meanwhile; not overwritten`;
  }
  if (step.action !== 'update' && step.action !== 'delete') return undefined;
  if (error.code === 'NOT_FOUND') {
    return `rule "${step.name}" was deleted by someone else meanwhile${step.action === 'update' ? '; not re-created' : ''}`;
  }
  if (error.code === 'NAME_TAKEN') return `another rule took the name "${step.name}" meanwhile`;
  if (error.code !== 'VERSION_MISMATCH') return undefined;
  let now = 'a newer version';
  try {
    now = `version ${(await client.getRule(step.id)).version}`;
  } catch {
    // the rule may be gone too; the generic wording is still true
  }
  const verb = step.action === 'update' ? 'overwritten' : 'deleted';
  return `rule "${step.name}" changed on the server since the plan (planned on version ${step.version}, now ${now}); not ${verb}`;
}

export interface ApplyOptions extends PlanOptions {
  /** plan only; write nothing */
  dryRun?: boolean;
  onOutcome?: (outcome: StepOutcome) => void;
  /** runs between planning and writing; tests use it to edit a rule concurrently */
  afterPlan?: (plan: Plan) => Promise<void> | void;
}

/** Reads the server's rules, plans, and (unless `dryRun`) executes. The demo seeds its rules with this. */
export async function applyRules(
  client: RulesApiClient,
  desired: readonly RuleInput[],
  options: ApplyOptions = {},
): Promise<ApplyResult> {
  const plan = planChanges(desired, await client.listRules(), options);
  if (options.dryRun) return { plan, outcomes: [], conflicts: 0, failures: 0 };
  await options.afterPlan?.(plan);
  return executePlan(client, plan, options.onOutcome);
}
