/**
 * Redis Cluster, a request whose limits live in several hash slots (a per-client limit beside a
 * `global` one): one script call may touch one slot only, so it cannot be one atomic call. Each slot
 * group is decided in turn, in the rule's order, each all or nothing; when a later group denies or
 * fails, what the earlier groups charged is given back at once (the script's "settle" with the charge
 * as a negative delta), so nothing is over-admitted. Limits after the denying group are not asked. A
 * settlement is split the same way, one call per slot group.
 */
import { algorithmOf } from '../algorithms/index.js';
import { decisionOf, outcomeOf } from '../engine.js';
import type {
  LimitCheck,
  LimitOutcome,
  LimitSpec,
  SettledLimit,
  Settlement,
  StoreDecision,
} from '../limits.js';
import type { StoreError } from '../store.js';
import { toStoreError } from './script.js';

/** The store's calls for one slot group, on the request's one clock. */
export interface SlotGroupCalls {
  /** one all-or-nothing call over `checks`, whose prefixed `keys` share a slot */
  acquire(checks: readonly LimitCheck[], keys: readonly string[]): Promise<StoreDecision>;
  /** one "settle" call over `settlements`, which share a slot */
  settle(settlements: readonly Settlement[]): Promise<SettledLimit[]>;
  /** a give-back failed: its charge stands until the limit recovers (limited more, never less) */
  onGiveBackFailure: ((error: StoreError) => void) | undefined;
}

/** A slot group an earlier call charged, and its decision's clock (for the give-back). */
interface ChargedGroup {
  readonly indexes: readonly number[];
  readonly atMs: number;
}

/**
 * Decides `checks` (prefixed `keys`, split into slot `groups` of indexes) one group at a time. A group
 * that denies ends the decision: the groups before it are given back what they were charged, at once
 * (their outcomes are then the levels after the give-back), the groups after it are not asked. A
 * group that fails gives back the same way and the failure is thrown, for the `STORE_FAILURE` policy.
 * The decision's `atMs` is the first group's clock.
 */
export async function acquireAcrossSlots(
  checks: readonly LimitCheck[],
  keys: readonly string[],
  groups: readonly number[][],
  calls: SlotGroupCalls,
): Promise<StoreDecision> {
  const outcomes: LimitOutcome[] = new Array(checks.length);
  const charged: ChargedGroup[] = [];
  let atMs: number | undefined;
  for (let g = 0; g < groups.length; g++) {
    const indexes = groups[g]!;
    let decision: StoreDecision;
    try {
      decision = await calls.acquire(
        indexes.map((i) => checks[i]!),
        indexes.map((i) => keys[i]!),
      );
    } catch (error) {
      await giveBack(charged, checks, outcomes, calls);
      throw error;
    }
    atMs ??= decision.atMs;
    for (let k = 0; k < indexes.length; k++) outcomes[indexes[k]!] = decision.limits[k]!;
    if (decision.allowed) {
      charged.push({ indexes, atMs: decision.atMs! });
      continue;
    }
    await giveBack(charged, checks, outcomes, calls);
    for (let later = g + 1; later < groups.length; later++) {
      for (const i of groups[later]!) outcomes[i] = notAsked(checks[i]!.spec);
    }
    break;
  }
  return decisionOf(outcomes, atMs);
}

/**
 * Gives back every charged group at once, in parallel: one "settle" per group with the charge as a
 * negative delta on the group's own clock (a concurrency slot is released). A give-back that fails
 * leaves the charge standing (reported to `onGiveBackFailure`): the client is limited more, never less.
 */
async function giveBack(
  charged: readonly ChargedGroup[],
  checks: readonly LimitCheck[],
  outcomes: LimitOutcome[],
  calls: SlotGroupCalls,
): Promise<void> {
  await Promise.all(
    charged.map(async ({ indexes, atMs }) => {
      const settlements: Settlement[] = indexes.map((i) => {
        const check = checks[i]!;
        const settlement: Settlement = {
          key: check.key,
          spec: check.spec,
          delta: -check.cost,
          admittedAtMs: atMs,
        };
        return check.leaseId === undefined ? settlement : { ...settlement, leaseId: check.leaseId };
      });
      try {
        const settled = await calls.settle(settlements);
        for (let k = 0; k < indexes.length; k++) {
          const { level, remaining, resetMs } = settled[k]!;
          outcomes[indexes[k]!] = { allowed: true, level, remaining, retryAfterMs: 0, resetMs };
        }
      } catch (error) {
        calls.onGiveBackFailure?.(toStoreError(error));
      }
    }),
  );
}

/**
 * Settles `settlements` (split into slot `groups` of indexes) with one call per group, in parallel:
 * each group's settlements are independent of the others'.
 */
export async function settleAcrossSlots(
  settlements: readonly Settlement[],
  groups: readonly number[][],
  calls: Pick<SlotGroupCalls, 'settle'>,
): Promise<SettledLimit[]> {
  const settled: SettledLimit[] = new Array(settlements.length);
  await Promise.all(
    groups.map(async (indexes) => {
      const results = await calls.settle(indexes.map((i) => settlements[i]!));
      for (let k = 0; k < indexes.length; k++) settled[indexes[k]!] = results[k]!;
    }),
  );
  return settled;
}

/**
 * The outcome reported for a limit after the one that denied, in another slot: not asked (asking would
 * charge it). Reported as its whole quota, allowed, with nothing to wait for.
 */
function notAsked(spec: LimitSpec): LimitOutcome {
  const level = algorithmOf(spec).idleLevel(spec);
  return outcomeOf(spec, { allowed: true, level, retryAfterMs: 0, resetMs: 0 });
}
