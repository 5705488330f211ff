/**
 * What the limiter tells subscribers (metrics today; analytics later), off the request's own stack
 * of work: a decision was taken, an exchange was settled. Listeners run synchronously and must be
 * cheap; with none subscribed an emit is one length check.
 */
import type { Decision } from '@sluice/shared';
import type { RequestDecision } from './metrics.js';

export interface DecisionEvent {
  /** the rule that applied ('' when none) */
  readonly rule: string;
  readonly outcome: RequestDecision;
  /** the store's answer (undefined when no limit was asked: no rule, unlimited) */
  readonly decision: Decision | undefined;
}

/** What the end of one exchange did, and whether the store took it. */
export interface SettlementEvent {
  readonly rule: string;
  /** `refund`: the whole cost given back; `charge`: a cost difference settled; `release`: slots given back only */
  readonly kind: 'refund' | 'charge' | 'release';
  /** false when the store failed (a slot then expires by itself; a charge or refund is lost) */
  readonly ok: boolean;
}

type Listener<E> = (event: E) => void;

export class LimiterEvents {
  readonly #decided: Listener<DecisionEvent>[] = [];
  readonly #settled: Listener<SettlementEvent>[] = [];

  onDecided(listener: Listener<DecisionEvent>): void {
    this.#decided.push(listener);
  }

  onSettled(listener: Listener<SettlementEvent>): void {
    this.#settled.push(listener);
  }

  /** true when someone listens to decisions (so the caller can skip building the event) */
  get decisionsWatched(): boolean {
    return this.#decided.length > 0;
  }

  decided(event: DecisionEvent): void {
    for (const listener of this.#decided) listener(event);
  }

  settled(event: SettlementEvent): void {
    for (const listener of this.#settled) listener(event);
  }
}
