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
 * ms); then the clock; separated by single spaces. Read in place, not split: the array and strings
 * `split` made were a sixteenth of what a batched decision allocated in the gateway (issue 16).
 */
export function decisionOfReply(reply: unknown, checks: readonly LimitCheck[]): StoreDecision {
  if (typeof reply !== 'string') throw unreadable(reply);
  const n = checks.length;
  const outcomes: LimitOutcome[] = new Array(n);
  const field: Field = { end: 0 };
  let at = 0;
  for (let i = 0; i < n; i++) {
    const flag = reply.charCodeAt(at);
    if (!((flag === ONE || flag === ZERO) && reply.charCodeAt(at + 1) === SPACE)) throw unreadable(reply);
    const level = numberAt(reply, at + 2, field);
    const retryAfterMs = field.end === reply.length ? Number.NaN : numberAt(reply, field.end + 1, field);
    const resetMs = field.end === reply.length ? Number.NaN : numberAt(reply, field.end + 1, field);
    if (
      field.end === reply.length ||
      !Number.isFinite(level) ||
      !Number.isInteger(retryAfterMs) ||
      !Number.isInteger(resetMs)
    ) {
      throw unreadable(reply);
    }
    at = field.end + 1;
    outcomes[i] = outcomeOf(checks[i]!.spec, { allowed: flag === ONE, level, retryAfterMs, resetMs });
  }
  const atMs = numberAt(reply, at, field);
  if (field.end !== reply.length || !Number.isFinite(atMs)) throw unreadable(reply);
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
 * A take "again"'s reply (acquire.lua's takeAgain): requests exactly like the one before them in their
 * batch, every check of which holds slots (`contexts`: each one's checks). Lines: how many the script
 * admitted (the first ones), its clock, then each check's live slots before them; each request's
 * outcome follows from those (the algorithm's `slots.takeVerdict`). Or '=' and then each request's own
 * acquire reply, a line each, where the script decided them one by one.
 */
export function decisionsOfTakesReply(
  reply: unknown,
  contexts: readonly (readonly LimitCheck[])[],
): StoreDecision[] {
  const k = contexts.length;
  const lines = typeof reply === 'string' ? reply.split('\n') : undefined;
  const decisions: StoreDecision[] = new Array(k);
  if (lines !== undefined && lines[0] === '=' && lines.length === k + 1) {
    for (let r = 0; r < k; r++) decisions[r] = decisionOfReply(lines[r + 1], contexts[r]!);
    return decisions;
  }
  const checks = contexts[0]!;
  const n = checks.length;
  if (lines === undefined || lines.length !== n + 2) throw unreadable(reply);
  const admitted = wholeOrDecimal(lines[0]!);
  const nowMs = wholeOrDecimal(lines[1]!);
  if (!(Number.isInteger(admitted) && admitted >= 0 && admitted <= k) || !Number.isFinite(nowMs)) {
    throw unreadable(reply);
  }
  const held: number[] = new Array(n);
  for (let c = 0; c < n; c++) {
    held[c] = wholeOrDecimal(lines[c + 2]!);
    if (!(Number.isInteger(held[c]) && held[c]! >= 0)) throw unreadable(reply);
  }
  for (let r = 0; r < k; r++) {
    const taken = r < admitted;
    const outcomes: LimitOutcome[] = new Array(n);
    for (let c = 0; c < n; c++) {
      const { spec } = checks[c]!;
      const verdict = algorithmOf(spec).slots!.takeVerdict(spec, held[c]! + (taken ? r : admitted), taken);
      outcomes[c] = outcomeOf(spec, verdict);
    }
    decisions[r] = decisionOf(outcomes, nowMs);
  }
  return decisions;
}

/**
 * A settlement's reply: one string, per settlement its level ('%.17g') and reset (whole ms; -1:
 * dropped, an edit since), separated by single spaces (no settlement: '').
 */
export function settledOfReply(reply: unknown, settlements: readonly Settlement[]): SettledLimit[] {
  const n = settlements.length;
  if (typeof reply !== 'string' || (reply === '') !== (n === 0)) throw unreadable(reply);
  const settled: SettledLimit[] = new Array(n);
  const field: Field = { end: 0 };
  let at = 0;
  for (let i = 0; i < n; i++) {
    const level = numberAt(reply, at, field);
    const resetMs = field.end === reply.length ? Number.NaN : numberAt(reply, field.end + 1, field);
    if (!Number.isFinite(level) || !Number.isInteger(resetMs)) throw unreadable(reply);
    // the last value ends the reply; every other is followed by a space
    if ((field.end === reply.length) !== (i === n - 1)) throw unreadable(reply);
    at = field.end + 1;
    settled[i] = resetMs === -1 ? DROPPED_SETTLEMENT : settledOf(settlements[i]!.spec, level, resetMs);
  }
  return settled;
}

/**
 * An "again" of give-backs (acquire.lua's settleAgain): slots taken by one call given back in a row,
 * one reply for them all, the one each would have got alone.
 */
export function settledAgainOfReply(
  reply: unknown,
  contexts: readonly (readonly Settlement[])[],
): SettledLimit[][] {
  const settled: SettledLimit[][] = new Array(contexts.length);
  for (let r = 0; r < contexts.length; r++) settled[r] = settledOfReply(reply, contexts[r]!);
  return settled;
}

const SPACE = 32;
const ZERO = 48;
const ONE = 49;
const NINE = 57;

/**
 * One reply's read position, owned by the decoding call: `numberAt` returns its number and leaves here
 * the index of the space after it, or the reply's length. A per-call object rather than a module-level
 * variable, so that no decode depends on another's leftovers (issue 39); one small object per reply,
 * where returning a pair per number would make one per field.
 */
interface Field {
  end: number;
}

/**
 * The number the script wrote ('%d' or '%.17g') from `text[from]` up to the next space or the end
 * (`field.end` is set to where it stops); NaN for an empty or unreadable one. Up to 15 digits (a whole
 * number below 2^53: exact) are read digit by digit, no string made; anything else as `Number` reads it.
 */
function numberAt(text: string, from: number, field: Field): number {
  let end = text.indexOf(' ', from);
  if (end === -1) end = text.length;
  field.end = end;
  if (end - from <= 15) {
    let value = 0;
    let i = from;
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      if (c < ZERO || c > NINE) break;
      value = value * 10 + (c - ZERO);
    }
    if (i === end) return end === from ? Number.NaN : value;
  }
  return wholeOrDecimal(text.slice(from, end));
}

/** A number the script wrote ('%d' or '%.17g'); NaN for an empty or unreadable one (Number('') is 0). */
function wholeOrDecimal(text: string): number {
  return text === '' ? Number.NaN : Number(text);
}

function unreadable(reply: unknown): StoreError {
  return new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
}
