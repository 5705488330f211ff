/**
 * What the limiter tells subscribers (metrics, top offenders), off the request's own stack of work:
 * a request was denied, an exchange was settled. Listeners run synchronously and must be
 * cheap; with none subscribed an emit is one length check.
 */

/**
 * A denied (or, `shadow`, would-be denied) request: the rule, its first denying limit and that limit's
 * client key. Every denial counts, whoever decided it: the store, the failure policy's local
 * fallback, or the denial cache (top offenders subscribe).
 */
export interface DenialEvent {
  readonly rule: string;
  readonly ruleId: string;
  /** the limit's name ('' for a v1 rule) */
  readonly limit: string;
  readonly clientKey: string;
  readonly shadow: boolean;
}

/** What the end of one exchange did, and whether the store took it. */
export interface SettlementEvent {
  readonly rule: string;
  /**
   * `refund`: the whole cost given back; `charge`: a cost difference settled; `release`: slots given
   * back only; `renew`: the slots of a running exchange kept for another lifetime
   */
  readonly kind: 'refund' | 'charge' | 'release' | 'renew';
  /** false when the store failed (a slot then expires by itself; a charge or refund is lost) */
  readonly ok: boolean;
}

type Listener<E> = (event: E) => void;

export class LimiterEvents {
  readonly #settled: Listener<SettlementEvent>[] = [];
  readonly #denied: Listener<DenialEvent>[] = [];

  onSettled(listener: Listener<SettlementEvent>): void {
    this.#settled.push(listener);
  }

  onDenied(listener: Listener<DenialEvent>): void {
    this.#denied.push(listener);
  }

  /** true when someone listens to denials (so the caller can skip building the event) */
  get denialsWatched(): boolean {
    return this.#denied.length > 0;
  }

  denied(event: DenialEvent): void {
    for (const listener of this.#denied) listener(event);
  }

  settled(event: SettlementEvent): void {
    for (const listener of this.#settled) listener(event);
  }
}
