/**
 * What the decision core needs of one rule, computed once per rule-set change so that a request
 * costs a trie lookup and one key per limit, nothing per rule: each limit's store key name and spec
 * (a concurrency slot's expiry is this gateway's to set), its RateLimit item name, the rule's
 * lifecycle (charge, refund, slots), lease size, metric counters, what reports its settlements, and
 * the decisions that carry no per-request data (unlimited, open, unavailable) as constants.
 */
import { algorithmOf, limitKeyName } from '../limiter/algorithms/index.js';
import { leaseRequestsOf } from '../limiter/algorithms/lease.js';
import { headerItemName } from '../limiter/headers.js';
import type { LimitSpec } from '../limiter/limits.js';
import type { CompiledCharge, CompiledLimit, CompiledRule } from '../rules/match.js';
import {
  type OpenDecision,
  UNAVAILABLE_RETRY_AFTER_MS,
  type UnavailableDecision,
  type UnlimitedDecision,
} from './decision.js';
import type { LimiterEvents, SettlementEvent } from './events.js';
import {
  SETTLEMENT_KINDS,
  type SettledReport,
  type SettledReports,
  type SettlementKind,
} from './exchange.js';

/** A counter the core bumps; prom-client counters and the gateway's counter cells both have `inc()`. */
export interface Counter {
  inc(): void;
}

/** The decision counters of one rule. */
export interface RuleCounters {
  readonly allowed: Counter;
  readonly denied: Counter;
  /** a shadow rule would have denied the request; it was admitted */
  readonly shadowDenied: Counter;
  /** `STORE_FAILURE=closed` refused it */
  readonly unavailable: Counter;
  /** the rule is `unlimited`, or (rule '') no rule applied */
  readonly unlimited: Counter;
}

/** Where the core counts its decisions (the gateway's Prometheus metrics). */
export interface DecisionMeter {
  /** the counters of a rule by name ('' for requests no rule applies to), asked once per rule-set change */
  requests(rule: string): RuleCounters;
  /** denials answered from the denial cache */
  readonly cachedDenials: Counter;
}

const NOT_COUNTED: Counter = { inc() {} };
const NO_COUNTERS: RuleCounters = {
  allowed: NOT_COUNTED,
  denied: NOT_COUNTED,
  shadowDenied: NOT_COUNTED,
  unavailable: NOT_COUNTED,
  unlimited: NOT_COUNTED,
};
export const NO_METER: DecisionMeter = { requests: () => NO_COUNTERS, cachedDenials: NOT_COUNTED };

/** One limit of a rule as the core decides it. */
export interface LimitPlan {
  /** '' for a v1 rule's single limit */
  readonly name: string;
  /** the limit's part of its store key, as its algorithm names it (`limitKeyName`) */
  readonly keyName: string;
  readonly spec: LimitSpec;
  /** what one request takes from it */
  readonly cost: number;
  /** its algorithm holds slots for the exchange (`Algorithm.slots`): a request takes one under its own id */
  readonly slots: boolean;
  readonly clientBy: CompiledLimit['clientBy'];
  readonly clientHeader: string | undefined;
  /** the header's value is a credential: keyed by its HMAC */
  readonly clientSecret: boolean;
  /** the verified claim of a `jwt` client */
  readonly clientClaim: string | undefined;
  /** its item name in RateLimit headers: `"<rule>"` (v1) or `"<rule>.<limit>"` */
  readonly headerItem: string;
}

export interface RulePlan {
  readonly compiled: CompiledRule;
  readonly id: string;
  readonly name: string;
  readonly shadow: boolean;
  /** 1: written with `limit` (429 bodies without a limit name); 2: `limits` */
  readonly format: 1 | 2;
  readonly unlimited: boolean;
  /** in the rule's order; empty when unlimited */
  readonly limits: readonly LimitPlan[];
  /** the whole `RateLimit-Policy` value ('' when unlimited) */
  readonly policyHeader: string;
  /** each limit's RateLimit item name, in order */
  readonly headerItems: readonly string[];
  readonly charge: CompiledCharge | undefined;
  readonly refundStatuses: ReadonlySet<number> | undefined;
  /** `refund.max`, undefined: each limit's default (exchange.ts) */
  readonly refundMax: number | undefined;
  /** has a concurrency limit (its denials are never cached: a slot may come back any moment) */
  readonly hasSlots: boolean;
  /** an admitted request has an exchange to settle (slots, charge or refund) */
  readonly settles: boolean;
  /** `mode: "lease"`: most requests one lease holds; 0 = decided exactly */
  readonly leaseRequests: number;
  readonly counters: RuleCounters;
  /**
   * per settlement kind, what tells the events that one was taken or failed: made here, not per
   * settlement (a concurrency rule settles once per request; two closures and an event object each
   * were about 170 of the 6,900 bytes a take and give-back allocated, issue 16)
   */
  readonly settledReports: SettledReports;
  readonly asUnlimited: UnlimitedDecision;
  readonly asOpen: OpenDecision;
  readonly asUnavailable: UnavailableDecision;
}

export interface PlanOptions {
  /** how long a concurrency slot this gateway takes is held at most, ms (UPSTREAM_TIMEOUT_MS + 5 s) */
  slotLeaseMs: number | undefined;
  meter: DecisionMeter;
  /** where settlements are told (metrics); none: a failed settlement is still caught */
  events?: LimiterEvents | undefined;
}

const NOTHING = (): void => {};
const UNTOLD: SettledReport = Object.freeze({ ok: NOTHING, failed: NOTHING });
/** No events (or a rule that settles nothing): every settlement's outcome is only caught. */
const NO_REPORTS: SettledReports = Object.freeze({
  refund: UNTOLD,
  charge: UNTOLD,
  release: UNTOLD,
  renew: UNTOLD,
});

function settledReportsOf(rule: string, events: LimiterEvents): SettledReports {
  const reports = {} as Record<SettlementKind, SettledReport>;
  for (const kind of SETTLEMENT_KINDS) {
    const ok: SettlementEvent = Object.freeze({ rule, kind, ok: true });
    const failed: SettlementEvent = Object.freeze({ rule, kind, ok: false });
    reports[kind] = Object.freeze({ ok: () => events.settled(ok), failed: () => events.settled(failed) });
  }
  return Object.freeze(reports);
}

export function planRule(compiled: CompiledRule, options: PlanOptions): RulePlan {
  const name = compiled.name;
  const limits: LimitPlan[] = compiled.limits.map((limit) => {
    const slots = algorithmOf(limit.spec).slots;
    return {
      name: limit.name,
      keyName: limitKeyName(limit.spec, limit.name),
      // a slot's lifetime is the taking gateway's to set
      spec:
        slots !== undefined && options.slotLeaseMs !== undefined
          ? Object.freeze(slots.withLifetime(limit.spec, options.slotLeaseMs))
          : limit.spec,
      cost: slots !== undefined ? 1 : limit.cost,
      slots: slots !== undefined,
      clientBy: limit.clientBy,
      clientHeader: limit.clientHeader,
      clientSecret: limit.clientSecret,
      clientClaim: limit.clientClaim,
      headerItem: headerItemName(name, limit.name),
    };
  });
  const hasSlots = limits.some((limit) => limit.slots);
  const settles = hasSlots || compiled.charge !== undefined || compiled.refundStatuses !== undefined;
  const plan: Omit<RulePlan, 'asUnlimited' | 'asOpen' | 'asUnavailable'> = {
    compiled,
    id: compiled.id,
    name,
    shadow: compiled.shadow,
    format: compiled.format,
    unlimited: compiled.unlimited,
    limits: Object.freeze(limits),
    policyHeader: compiled.policyHeader,
    headerItems: Object.freeze(limits.map((limit) => limit.headerItem)),
    charge: compiled.charge,
    refundStatuses: compiled.refundStatuses,
    refundMax: compiled.refundMax,
    hasSlots,
    settles,
    leaseRequests: compiled.mode === 'lease' ? leaseRequestsOf(limits) : 0,
    counters: options.meter.requests(name),
    settledReports: settles && options.events ? settledReportsOf(name, options.events) : NO_REPORTS,
  };
  const full = plan as RulePlan;
  Object.assign(full, {
    asUnlimited: Object.freeze({ kind: 'unlimited', rule: full }),
    asOpen: Object.freeze({ kind: 'open', rule: full }),
    asUnavailable: Object.freeze({
      kind: 'unavailable',
      rule: full,
      retryAfterMs: UNAVAILABLE_RETRY_AFTER_MS,
    }),
  });
  return Object.freeze(full);
}
