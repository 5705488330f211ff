/**
 * The script's replies read back: an acquire's per-check outcomes and clock, a settlement's levels. A
 * reply of the wrong shape is a `STORE_ERROR` (never a guessed decision).
 */
import { decisionOf, outcomeOf, settledOf } from '../engine.js';
import {
  DROPPED_SETTLEMENT,
  type LimitCheck,
  type LimitOutcome,
  type SettledLimit,
  type Settlement,
  type StoreDecision,
} from '../limits.js';
import { StoreError } from '../store.js';

/** An acquire's reply: per check allowed 1|0, level ('%.17g'), retry-after and reset (whole ms); then the clock. */
export function decisionOfReply(reply: unknown, checks: readonly LimitCheck[]): StoreDecision {
  const n = checks.length;
  const outcomes = Array.isArray(reply) && reply.length === 4 * n + 1 ? outcomesOf(reply, checks) : undefined;
  const atMs = outcomes === undefined ? Number.NaN : Number((reply as unknown[])[4 * n]);
  if (outcomes === undefined || !Number.isFinite(atMs)) throw unreadable(reply);
  return decisionOf(outcomes, atMs);
}

/** A settlement's reply: per settlement its level ('%.17g') and reset (whole ms; -1: dropped, an edit since). */
export function settledOfReply(reply: unknown, settlements: readonly Settlement[]): SettledLimit[] {
  if (!Array.isArray(reply) || reply.length !== 2 * settlements.length) throw unreadable(reply);
  const settled: SettledLimit[] = new Array(settlements.length);
  for (let i = 0; i < settlements.length; i++) {
    const levelText: unknown = reply[2 * i];
    const resetMs: unknown = reply[2 * i + 1];
    const level = typeof levelText === 'string' ? Number(levelText) : Number.NaN;
    if (!Number.isFinite(level) || typeof resetMs !== 'number') throw unreadable(reply);
    settled[i] = resetMs === -1 ? DROPPED_SETTLEMENT : settledOf(settlements[i]!.spec, level, resetMs);
  }
  return settled;
}

function outcomesOf(reply: unknown[], checks: readonly LimitCheck[]): LimitOutcome[] | undefined {
  const outcomes: LimitOutcome[] = new Array(checks.length);
  for (let i = 0; i < checks.length; i++) {
    // read in place: no slice per check (a reply is parsed once per decision)
    const at = 4 * i;
    const allowed = reply[at];
    const levelText = reply[at + 1];
    const retryAfterMs = reply[at + 2];
    const resetMs = reply[at + 3];
    const level = typeof levelText === 'string' ? Number(levelText) : Number.NaN;
    if (
      !(allowed === 0 || allowed === 1) ||
      !Number.isFinite(level) ||
      typeof retryAfterMs !== 'number' ||
      typeof resetMs !== 'number'
    ) {
      return undefined;
    }
    outcomes[i] = outcomeOf(checks[i]!.spec, { allowed: allowed === 1, level, retryAfterMs, resetMs });
  }
  return outcomes;
}

function unreadable(reply: unknown): StoreError {
  return new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
}
