/**
 * The script's replies read back: an acquire's per-check outcomes and clock, a settlement's levels. A
 * reply of the wrong shape is a `STORE_ERROR` (never a guessed decision).
 */
import { algorithmOf } from '../algorithms/index.js';
import { decideFrom, decisionOf, outcomeOf, type StateTable, settledOf } from '../engine.js';
import {
  DROPPED_SETTLEMENT,
  type LimitCheck,
  type LimitOutcome,
  type SettledLimit,
  type Settlement,
  type StoreDecision,
} from '../limits.js';
import { StoreError } from '../store.js';

/**
 * An acquire's reply: one string, per check allowed 1|0, level ('%.17g'), retry-after and reset (whole
 * ms); then the clock; separated by single spaces.
 */
export function decisionOfReply(reply: unknown, checks: readonly LimitCheck[]): StoreDecision {
  const n = checks.length;
  const values = typeof reply === 'string' ? reply.split(' ') : undefined;
  const outcomes =
    values !== undefined && values.length === 4 * n + 1 ? outcomesOf(values, checks) : undefined;
  const atMs = outcomes === undefined ? Number.NaN : wholeOrDecimal(values![4 * n]!);
  if (outcomes === undefined || !Number.isFinite(atMs)) throw unreadable(reply);
  return decisionOf(outcomes, atMs);
}

/**
 * An "again"'s reply (acquire.lua's againRequest): requests exactly like the one before them in their
 * batch (`contexts`: each one's checks, the same keys and limits), decided in order from the states that
 * request left, by the TypeScript twin of the script (engine.ts: the in-process store's engine, which
 * the differential tests hold to the Lua bit for bit). Lines: how many the script admitted, its clock,
 * then each key's state ('' for none). A replay that admits another number than the script did is a
 * `STORE_ERROR`, never a guessed decision.
 */
export function decisionsAgainOfReply(
  reply: unknown,
  contexts: readonly (readonly LimitCheck[])[],
): StoreDecision[] {
  const checks = contexts[0]!;
  const n = checks.length;
  const lines = typeof reply === 'string' ? reply.split('\n') : undefined;
  if (lines === undefined || lines.length !== n + 2) throw unreadable(reply);
  const admitted = wholeOrDecimal(lines[0]!);
  const nowMs = wholeOrDecimal(lines[1]!);
  if (!Number.isInteger(admitted) || !Number.isFinite(nowMs)) throw unreadable(reply);
  const states = new Map<string, unknown>();
  for (let i = 0; i < n; i++) {
    const text = lines[i + 2]!;
    const state = text === '' ? undefined : algorithmOf(checks[i]!.spec).redisState.parse(text);
    if (state !== undefined) states.set(checks[i]!.key, state);
  }
  const table: StateTable = {
    get: (key) => states.get(key),
    set: (key, state, ttlMs) => {
      if (ttlMs === 0) states.delete(key);
      else states.set(key, state);
    },
  };
  const decisions: StoreDecision[] = new Array(contexts.length);
  let allowed = 0;
  for (let r = 0; r < contexts.length; r++) {
    decisions[r] = decideFrom(table, contexts[r]!, nowMs); // the store asserted each request's checks
    if (decisions[r]!.allowed) allowed++;
  }
  if (allowed !== admitted) {
    throw new StoreError(
      'STORE_ERROR',
      `the limiter admitted ${admitted} of ${contexts.length} requests, its TypeScript twin ${allowed}: ${JSON.stringify(reply)}`,
    );
  }
  return decisions;
}

/**
 * A settlement's reply: one string, per settlement its level ('%.17g') and reset (whole ms; -1:
 * dropped, an edit since), separated by single spaces.
 */
export function settledOfReply(reply: unknown, settlements: readonly Settlement[]): SettledLimit[] {
  // no settlement: the script replies '' (split would read one empty value)
  const values = typeof reply === 'string' ? (reply === '' ? [] : reply.split(' ')) : undefined;
  if (values === undefined || values.length !== 2 * settlements.length) throw unreadable(reply);
  const settled: SettledLimit[] = new Array(settlements.length);
  for (let i = 0; i < settlements.length; i++) {
    const level = wholeOrDecimal(values[2 * i]!);
    const resetMs = wholeOrDecimal(values[2 * i + 1]!);
    if (!Number.isFinite(level) || !Number.isInteger(resetMs)) throw unreadable(reply);
    settled[i] = resetMs === -1 ? DROPPED_SETTLEMENT : settledOf(settlements[i]!.spec, level, resetMs);
  }
  return settled;
}

function outcomesOf(values: string[], checks: readonly LimitCheck[]): LimitOutcome[] | undefined {
  const outcomes: LimitOutcome[] = new Array(checks.length);
  for (let i = 0; i < checks.length; i++) {
    const at = 4 * i;
    const allowed = values[at];
    const level = wholeOrDecimal(values[at + 1]!);
    const retryAfterMs = wholeOrDecimal(values[at + 2]!);
    const resetMs = wholeOrDecimal(values[at + 3]!);
    if (
      !(allowed === '1' || allowed === '0') ||
      !Number.isFinite(level) ||
      !Number.isInteger(retryAfterMs) ||
      !Number.isInteger(resetMs)
    ) {
      return undefined;
    }
    outcomes[i] = outcomeOf(checks[i]!.spec, { allowed: allowed === '1', level, retryAfterMs, resetMs });
  }
  return outcomes;
}

/** A number the script wrote ('%d' or '%.17g'); NaN for an empty or unreadable one (Number('') is 0). */
function wholeOrDecimal(text: string): number {
  return text === '' ? Number.NaN : Number(text);
}

function unreadable(reply: unknown): StoreError {
  return new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
}
