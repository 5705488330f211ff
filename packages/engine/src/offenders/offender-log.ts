/**
 * What one gateway saw denied, per rule and minute, in bounded memory (docs/visibility.md): a
 * Space-Saving summary of `capacity` counters per (rule, minute) holds the denied client keys of every
 * limit of the rule (shadow would-be denials flagged), kept for 60 minutes. A second set of summaries
 * holds what has not been flushed to Redis yet; `takeUnflushed` hands it over and starts it afresh.
 *
 * Memory: at most 60 minutes × (rules with denials) × `capacity` counters, plus the unflushed ones.
 * Recording a denial is a map lookup and an increment (a scan of the counters when a new client
 * arrives at a full summary); it never calls Redis.
 */
import {
  compareOffenders,
  type DenialEvent,
  minuteOf,
  OFFENDERS_MAX_MINUTES,
  OFFENDERS_TOP,
  type OffenderItem,
  offenderItemOf,
  offenderMember,
  type RuleOffenderCounts,
} from '@sluice/shared';
import { SpaceSaving } from './space-saving.js';

/** Counters per (rule, minute): exact while a rule has at most this many offenders in a minute. */
export const DEFAULT_OFFENDER_CAPACITY = 64;

/** rule id → minute → summary */
type Summaries = Map<string, Map<number, SpaceSaving>>;

export interface OffenderLogOptions {
  capacity?: number;
  /** wall clock, ms since the epoch (minutes are wall-clock minutes, shared by every gateway) */
  nowMs?: () => number;
}

export class OffenderLog {
  readonly #capacity: number;
  readonly #nowMs: () => number;
  #kept: Summaries = new Map();
  #unflushed: Summaries = new Map();
  #prunedAt = -1;

  constructor(options: OffenderLogOptions = {}) {
    this.#capacity = options.capacity ?? DEFAULT_OFFENDER_CAPACITY;
    this.#nowMs = options.nowMs ?? Date.now;
  }

  /** Counts one denial (or shadow would-be denial). */
  record(event: DenialEvent): void {
    const minute = minuteOf(this.#nowMs());
    if (minute !== this.#prunedAt) this.#prune(minute);
    const member = offenderMember(event.limit, event.clientKey, event.shadow);
    this.#summary(this.#kept, event.ruleId, minute).add(member);
    this.#summary(this.#unflushed, event.ruleId, minute).add(member);
  }

  /** The top offenders of one rule over the last `minutes` minutes (this one included), most denied first. */
  top(ruleId: string, minutes: number): OffenderItem[] {
    const now = minuteOf(this.#nowMs());
    const byMinute = this.#kept.get(ruleId);
    if (byMinute === undefined) return [];
    const totals = new Map<string, number>();
    for (const [minute, summary] of byMinute) {
      if (minute <= now - minutes || minute > now) continue;
      for (const { item, count } of summary.items()) totals.set(item, (totals.get(item) ?? 0) + count);
    }
    const items: OffenderItem[] = [];
    for (const [member, denied] of totals) {
      const item = offenderItemOf(member, denied);
      if (item !== undefined) items.push(item);
    }
    return items.sort(compareOffenders).slice(0, OFFENDERS_TOP);
  }

  /** The counts recorded since the last call (rule id → minute → member → denials), and a fresh start. */
  takeUnflushed(): Map<string, RuleOffenderCounts> {
    const taken = this.#unflushed;
    this.#unflushed = new Map();
    const counts = new Map<string, RuleOffenderCounts>();
    for (const [ruleId, byMinute] of taken) {
      const minutes = new Map<number, Map<string, number>>();
      for (const [minute, summary] of byMinute) {
        minutes.set(minute, new Map(summary.items().map(({ item, count }) => [item, count])));
      }
      counts.set(ruleId, minutes);
    }
    return counts;
  }

  #summary(summaries: Summaries, ruleId: string, minute: number): SpaceSaving {
    let byMinute = summaries.get(ruleId);
    if (byMinute === undefined) {
      byMinute = new Map();
      summaries.set(ruleId, byMinute);
    }
    let summary = byMinute.get(minute);
    if (summary === undefined) {
      summary = new SpaceSaving(this.#capacity);
      byMinute.set(minute, summary);
    }
    return summary;
  }

  /** Forgets minutes older than the longest question (once per minute, on the first denial in it). */
  #prune(minute: number): void {
    this.#prunedAt = minute;
    for (const [ruleId, byMinute] of this.#kept) {
      for (const m of byMinute.keys()) if (m <= minute - OFFENDERS_MAX_MINUTES) byMinute.delete(m);
      if (byMinute.size === 0) this.#kept.delete(ruleId);
    }
  }
}
