/**
 * A request's whole life after admission (docs/lifecycle.md), in one object: the settle-or-release
 * handle a `Decision` carries. The decision core creates it; the transport feeds it (response status,
 * the charge header, body bytes, its own 502/504) and ends it, exactly once, whichever way the
 * exchange ends: the response complete, the client gone mid-request or mid-response, the upstream
 * unreachable or timed out, or the request refused by a later check. `end()` is idempotent, so a
 * transport may call it from every ending it sees (Node reports them all as the response's `close`).
 *
 * Settlement, one store call each:
 * - at the response headers: a refund (the status is one of `refund.statuses`: the whole cost back) or
 *   a charge from a header or from the upstream's time (each token bucket and sliding window settled by
 *   the difference, the real cost capped at `charge.max`);
 * - a `bytes` or `duration` charge never goes below the admission cost when the client shaped it: a
 *   `HEAD` (no body, a quicker answer) or an exchange the client ended early (`keepAdmissionCost()`);
 *   otherwise leaving right after the headers would make every request nearly free (SPEC §5);
 * - while it runs (a long response, a WebSocket): its slots renewed (`renew()`, about every third of
 *   their lifetime, by the core's `SlotKeeper`), so a slot outlives its exchange, never the reverse;
 * - at the end: the slots given back, with whatever cost settlement is still due (bytes: the body is
 *   over; a refund for the gateway's own 502 — never its 504: the upstream worked for the whole timeout,
 *   and giving that back would let a client keep a slow endpoint busy without limit) in the same call.
 * Only rules with a concurrency limit, `charge` or `refund` get an exchange: others cost nothing here.
 */
import { algorithmOf } from '../limiter/algorithms/index.js';
import type { LimitCheck, Settlement } from '../limiter/limits.js';
import type { CompiledCharge } from '../rules/match.js';
import type { DecidedBy } from './store-policy.js';

export interface ExchangeRule {
  readonly name: string;
  /** has a concurrency limit: the exchange holds slots */
  readonly hasSlots: boolean;
  readonly charge: CompiledCharge | undefined;
  readonly refundStatuses: ReadonlySet<number> | undefined;
  /** `refund.max`; undefined: each limit's default (its capacity or max) */
  readonly refundMax: number | undefined;
  /** what the sink tells when a settlement of each kind is taken or fails (made once per rule set) */
  readonly settledReports: SettledReports;
}

/** every kind of settlement, in the order metrics list them */
export const SETTLEMENT_KINDS = ['refund', 'charge', 'release', 'renew'] as const;
export type SettlementKind = (typeof SETTLEMENT_KINDS)[number];

/** A settlement's outcome told (`ok`), or its failure caught and told (`failed`). */
export interface SettledReport {
  readonly ok: () => void;
  readonly failed: () => void;
}

export type SettledReports = Readonly<Record<SettlementKind, SettledReport>>;

/** Where an exchange's settlements go (the decision core): the store that took the admission. */
export interface SettleSink {
  settle(exchange: Exchange, kind: SettlementKind, settlements: readonly Settlement[]): void;
  /** `end()` was called, after its last settlement (if any) was handed to `settle` */
  ended(exchange: Exchange): void;
}

/** A cost an upstream may state: a plain non-negative decimal number (`12`, `0.5`, `1e3`). */
const COST_PATTERN = /^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * The cost an upstream's charge header states, or undefined (absent, repeated, not a number ≥ 0). A
 * number too large to be finite (`1e309`, 400 nines) is Infinity: it is capped at `charge.max` like
 * any other large value, never mistaken for garbage (which would leave the admission cost).
 */
export function statedCost(value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (!COST_PATTERN.test(text)) return undefined;
  // the pattern admits only non-negative decimals: Number() gives a finite value or +Infinity
  return Number(text);
}

export class Exchange {
  /** the charge header's value as the upstream sent it (the header itself never reaches the client) */
  chargeHeader: string | string[] | undefined;
  /** response body bytes sent so far (counted only for `charge.from: "bytes"`) */
  bytes = 0;
  #responded = false;
  /** the cost is settled (or refunded, or stands): nothing more to do about it */
  #costDone: boolean;
  /** a refund is due at the end (the gateway's own 502) */
  #refundAtEnd = false;
  /** a `bytes` or `duration` charge may not go below the admission cost (HEAD, or the client left early) */
  #keepsAdmissionCost = false;
  #ended = false;
  /** monotonic ms of the slots' last renewal (the admission until the first) */
  #renewedAtMs: number;
  /** settlements handed to the sink whose store call has not answered yet */
  #settling = 0;
  /** made only when someone asks for `settled` (nothing per request otherwise) */
  #settled: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(
    readonly rule: ExchangeRule,
    readonly checks: readonly LimitCheck[],
    /** the store that decided the admission: every settlement goes there */
    readonly decidedBy: DecidedBy,
    /** the store's clock of the admission (`StoreDecision.atMs`): a window gives back where it counted */
    readonly admittedAtStoreMs: number,
    /** monotonic ms when the request was admitted (upstream time is measured from here) */
    readonly admittedAtMs: number,
    readonly sink: SettleSink,
    readonly now: () => number,
  ) {
    this.#costDone = rule.charge === undefined && rule.refundStatuses === undefined;
    this.#renewedAtMs = admittedAtMs;
  }

  /** `end()` was called: nothing more is settled or renewed */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Resolves once the exchange has ended and the store has answered every settlement it sent (a
   * failed one included: it is counted and logged, never thrown). What a caller that must see the
   * settled state awaits, instead of sleeping; made on first use, so it costs a request nothing.
   */
  get settled(): Promise<void> {
    if (this.#settled === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      this.#settled = { promise, resolve };
      if (this.#ended && this.#settling === 0) resolve();
    }
    return this.#settled.promise;
  }

  /** The sink handed one settlement of this exchange to its store (the decision core calls these two). */
  settlementSent(): void {
    this.#settling++;
  }

  /** The store answered one settlement of this exchange. */
  settlementAnswered(): void {
    this.#settling--;
    if (this.#ended && this.#settling === 0) this.#settled?.resolve();
  }

  /** monotonic ms when the slots were last renewed (or taken) */
  get renewedAtMs(): number {
    return this.#renewedAtMs;
  }

  /** The exchange still runs: its slots kept for another lifetime, in one store call. Not once ended. */
  renew(): void {
    if (this.#ended) return;
    this.#renewedAtMs = this.now();
    const renewals: Settlement[] = [];
    for (const check of this.checks) {
      if (check.spec.algorithm !== 'concurrency') continue;
      renewals.push({
        key: check.key,
        spec: check.spec,
        delta: 0,
        admittedAtMs: this.admittedAtStoreMs,
        leaseId: check.leaseId,
        renew: true,
      });
    }
    if (renewals.length > 0) this.sink.settle(this, 'renew', renewals);
  }

  /** true when the response body must be counted */
  get countsBytes(): boolean {
    return this.rule.charge?.from === 'bytes' && !this.#costDone;
  }

  /**
   * The client shaped this exchange (a `HEAD`, or it went away before the response was complete): a
   * `bytes` or `duration` charge settles to at least what the request was admitted on. Call before
   * `responded` for a HEAD; any time before `end` for a client gone early.
   */
  keepAdmissionCost(): void {
    this.#keepsAdmissionCost = true;
  }

  /** The upstream's response headers arrived with `status`: refund, or charge from a header or the time. */
  responded(status: number): void {
    this.#responded = true;
    if (this.#costDone) return;
    if (this.rule.refundStatuses?.has(status)) {
      this.#costDone = true;
      this.#send('refund', this.#costSettlements('refund'));
      return;
    }
    const charge = this.rule.charge;
    if (charge === undefined || charge.from === 'bytes') return; // bytes: at the end
    this.#costDone = true;
    const cost =
      charge.from === 'header'
        ? statedCost(this.chargeHeader)
        : Math.ceil((this.now() - this.admittedAtMs) / charge.unitMs);
    if (cost === undefined) return;
    const floor = charge.from === 'duration' && this.#keepsAdmissionCost;
    this.#send('charge', this.#costSettlements(Math.min(cost, charge.max), floor));
  }

  /**
   * The gateway answered for the upstream itself: 502 (unreachable: it did no work, refundable like
   * an upstream 502) or 504 (timed out: never refunded, the upstream worked for the whole timeout).
   */
  failed(status: 502 | 504): void {
    if (this.#costDone || this.#responded) return;
    this.#costDone = true;
    this.#refundAtEnd = status === 502 && this.rule.refundStatuses?.has(502) === true;
  }

  /** The exchange is over, whichever way: slots back, and any cost settlement still due. Once. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    let settlements: Settlement[] = [];
    let kind: SettlementKind = 'release';
    if (this.#refundAtEnd) {
      settlements = this.#costSettlements('refund');
      kind = 'refund';
    } else if (!this.#costDone && this.#responded && this.rule.charge?.from === 'bytes') {
      const charge = this.rule.charge;
      settlements = this.#costSettlements(
        Math.min(Math.ceil(this.bytes / charge.unitBytes), charge.max),
        this.#keepsAdmissionCost,
      );
      kind = 'charge';
    }
    this.#costDone = true;
    for (const check of this.checks) {
      if (check.leaseId === undefined) continue; // only slots are given back
      settlements.push({
        key: check.key,
        spec: check.spec,
        delta: 0,
        admittedAtMs: this.admittedAtStoreMs,
        leaseId: check.leaseId,
      });
    }
    if (settlements.length > 0) this.sink.settle(this, kind, settlements);
    this.sink.ended(this);
    if (this.#settling === 0) this.#settled?.resolve();
  }

  /**
   * Each token bucket and sliding window settled to `cost` (or, for a refund, to nothing, bounded per
   * period by `refund.max`: SPEC §5); with `atLeastAdmitted`, a cost below what a limit was admitted on
   * leaves that admission standing.
   */
  #costSettlements(cost: number | 'refund', atLeastAdmitted = false): Settlement[] {
    const settlements: Settlement[] = [];
    for (const check of this.checks) {
      if (check.leaseId !== undefined) continue; // a slot has no cost to settle
      const delta = cost === 'refund' ? -check.cost : cost - check.cost;
      if (delta === 0 || (atLeastAdmitted && delta < 0)) continue;
      const settlement = { key: check.key, spec: check.spec, delta, admittedAtMs: this.admittedAtStoreMs };
      if (cost !== 'refund') settlements.push(settlement);
      else {
        const refundMax = this.rule.refundMax ?? algorithmOf(check.spec).defaultRefundMax(check.spec);
        settlements.push({ ...settlement, refundMax });
      }
    }
    return settlements;
  }

  #send(kind: 'refund' | 'charge', settlements: Settlement[]): void {
    if (settlements.length > 0) this.sink.settle(this, kind, settlements);
  }
}
