/**
 * The store as the decision core sees it: the primary store (Redis) behind a circuit breaker, with
 * the `STORE_FAILURE` policy deciding whenever the store cannot (docs/configuration.md, `STORE_FAILURE`).
 *
 * - `local`: the same limiter engine in an in-process store of this gateway (a `fallback` answer),
 *   holding a fair share of each limit: its numbers divided by the gateways seen alive in the last
 *   minute (`gateways`, learnt from a heartbeat while the store answered), so that N gateways together
 *   admit about the limit during an outage, not N times it;
 * - `open`: admit, uncounted (an `open` answer);
 * - `closed`: refuse with 503 (an `unavailable` answer).
 *
 * The breaker: after FAILURES_TO_OPEN consecutive failures it opens and every decision goes straight
 * to the policy, without touching the dead store, for a cool-down; then it lets ONE probe decision
 * through (half-open). The probe's success closes the breaker; its failure opens it for another
 * cool-down. A failure is either a store error (no connection: instant with ioredis'
 * `enableOfflineQueue: false`) or no answer within STORE_TIMEOUT_MS (ioredis' `commandTimeout`),
 * so no request ever waits longer than the timeout. State changes are logged once, not per request.
 *
 * One breaker per failure domain (`Store.domainOf`): on a Redis Cluster, per master, so a dead master
 * sends only the requests whose keys live there to the policy while the others stay on Redis. At most
 * MAX_BREAKERS are kept (closed, healthy ones are dropped first); the breaker-state metric shows the
 * worst of them.
 */
import { algorithmOf } from '../limiter/algorithms/index.js';
import type { LimitCheck, LimitSpec, SettledLimit, Settlement, StoreDecision } from '../limiter/limits.js';
import type { Store } from '../limiter/store.js';

/** What a gateway does when its store cannot decide (`STORE_FAILURE`). */
export type StoreFailurePolicy = 'local' | 'open' | 'closed';

/**
 * What the store policy answers for one request's checks: the store's decision, the local
 * fallback's (`STORE_FAILURE=local`), or the policy's word when no store decided (`open`: admit
 * uncounted; `closed`: refuse with 503). A fallback is its own variant, so everything downstream
 * (the denial cache, settlement, the lease manager) tells it apart by its `kind`.
 */
export type PolicyAnswer =
  | { readonly kind: 'store'; readonly decision: StoreDecision }
  | { readonly kind: 'fallback'; readonly decision: StoreDecision }
  | { readonly kind: 'open' }
  | { readonly kind: 'unavailable' };

/** Which store a settlement goes to: the one that decided the admission. */
export type DecidedBy = 'store' | 'fallback';

const OPEN: PolicyAnswer = Object.freeze({ kind: 'open' });
const UNAVAILABLE: PolicyAnswer = Object.freeze({ kind: 'unavailable' });

/** The worst breaker state as a metric value: 0 closed, 1 open, 2 half-open. */
export type BreakerStateValue = 0 | 1 | 2;

/** What the policy reports; the gateway binds it to its Prometheus metrics. */
export interface StorePolicyMetrics {
  /** one decision's latency in seconds, by the store that took it (`local`: the fallback) */
  decisionSeconds(store: 'primary' | 'local', seconds: number): void;
  /** a decision the failure policy took instead of the store */
  fallback(): void;
  /** a store call failed: no answer in time, or any other failure */
  storeError(kind: 'timeout' | 'error'): void;
  /** a call sent to the primary store */
  storeCall(kind: 'acquire' | 'settle'): void;
  /** the worst breaker state changed */
  breakerState(value: BreakerStateValue): void;
}

/** The log lines the policy writes on state changes (pino's `(fields, message)` signature). */
export interface PolicyLogger {
  info(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

const NO_METRICS: StorePolicyMetrics = {
  decisionSeconds() {},
  fallback() {},
  storeError() {},
  storeCall() {},
  breakerState() {},
};

/** Consecutive failures that open the breaker. */
export const FAILURES_TO_OPEN = 3;
/** How long an open breaker keeps the store out before one probe, in ms. */
export const DEFAULT_COOL_DOWN_MS = 1_000;

/** Most failure domains with a breaker of their own (a Cluster has at most a few hundred masters). */
export const MAX_BREAKERS = 1_024;

type BreakerState = 'closed' | 'open' | 'half-open';

/** One failure domain's breaker. */
class Breaker {
  state: BreakerState = 'closed';
  consecutiveFailures = 0;
  /** monotonic ms when an open breaker lets its next probe through */
  probeAtMs = 0;
  probeInFlight = false;
}
const STATE_VALUE: Record<BreakerState, BreakerStateValue> = { closed: 0, open: 1, 'half-open': 2 };

export interface GuardedStoreOptions {
  primary: Store;
  policy: StoreFailurePolicy;
  /** the in-process store for policy `local` (the primary itself when it is in-process) */
  local: Store | undefined;
  metrics?: StorePolicyMetrics;
  log: PolicyLogger;
  coolDownMs?: number;
  /** monotonic clock in ms (default `performance.now`); tests pass a fake one */
  now?: () => number;
  /** how many gateways share the limits (at least 1; default 1): the local fallback holds 1/N of each */
  gateways?: () => number;
}

export class GuardedStore {
  readonly #primary: Store;
  readonly #policy: StoreFailurePolicy;
  readonly #local: Store | undefined;
  readonly #metrics: StorePolicyMetrics;
  readonly #log: PolicyLogger;
  readonly #coolDownMs: number;
  readonly #now: () => number;
  readonly #gateways: () => number;
  /** each spec divided among N gateways, by spec object (a rule set's specs live as long as it) */
  readonly #shares = new WeakMap<LimitSpec, { gateways: number; spec: LimitSpec }>();

  /** by failure domain ('' for a store of one domain) */
  readonly #breakers = new Map<string, Breaker>();
  #reportedState: BreakerState = 'closed';

  constructor(options: GuardedStoreOptions) {
    this.#primary = options.primary;
    this.#policy = options.policy;
    this.#local = options.local;
    this.#metrics = options.metrics ?? NO_METRICS;
    this.#log = options.log;
    this.#coolDownMs = options.coolDownMs ?? DEFAULT_COOL_DOWN_MS;
    this.#now = options.now ?? (() => performance.now());
    this.#gateways = options.gateways ?? (() => 1);
    if (this.#policy === 'local' && this.#local === undefined) {
      throw new Error('STORE_FAILURE=local needs an in-process store');
    }
  }

  /** The primary store's kind. */
  get kind(): Store['kind'] {
    return this.#primary.kind;
  }

  /** The worst breaker state over every failure domain. */
  get breakerState(): BreakerState {
    return this.#reportedState;
  }

  /** The breaker state of one failure domain ('' for a store of one domain). */
  breakerStateOf(domain: string): BreakerState {
    return this.#breakers.get(domain)?.state ?? 'closed';
  }

  /** A decision from the store, or from the policy when the store fails or the breaker is open. */
  acquire(checks: readonly LimitCheck[]): Promise<PolicyAnswer> {
    const domain = this.#primary.domainOf?.(checks) ?? '';
    const breaker = this.#breakerOf(domain);
    if (breaker.state !== 'closed') {
      if (breaker.probeInFlight || this.#now() < breaker.probeAtMs) return this.#fallback(checks);
      breaker.probeInFlight = true;
      this.#setState(breaker, 'half-open');
    }
    const startedAt = this.#now();
    this.#metrics.storeCall('acquire');
    return this.#primary.acquire(checks).then(
      (decision): PolicyAnswer => {
        this.#metrics.decisionSeconds('primary', (this.#now() - startedAt) / 1000);
        if (breaker.state !== 'closed' || breaker.consecutiveFailures !== 0) this.#onSuccess(breaker, domain);
        return { kind: 'store', decision };
      },
      (error: unknown) => {
        this.#onFailure(breaker, domain, error);
        return this.#fallback(checks);
      },
    );
  }

  /**
   * The end of an exchange, on the store that decided its admission (`by`: the primary, or the
   * in-process one for a decision the `local` policy took). It does not move the breaker: a
   * settlement that fails is lost (a slot then expires by itself), and admission decides whether
   * the store is healthy.
   */
  settle(by: DecidedBy, settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    if (by === 'fallback') {
      // on the same share the admission was decided on (a refund must not fill a share to the whole)
      const gateways = Math.max(1, Math.floor(this.#gateways()));
      const shared =
        gateways === 1 || this.#local === this.#primary
          ? settlements
          : settlements.map((s) => ({
              ...s,
              spec: this.#shareSpec(s.spec, gateways),
              // refund.max is shared out like the limit it bounds
              ...(s.refundMax !== undefined && { refundMax: s.refundMax / gateways }),
            }));
      return this.#local!.settle(shared);
    }
    this.#metrics.storeCall('settle');
    return this.#primary.settle(settlements);
  }

  async close(): Promise<void> {
    await this.#primary.close();
    if (this.#local !== this.#primary) await this.#local?.close();
  }

  #breakerOf(domain: string): Breaker {
    let breaker = this.#breakers.get(domain);
    if (breaker !== undefined) return breaker;
    if (this.#breakers.size >= MAX_BREAKERS) {
      // drop a healthy one (nothing to remember); if none is, the oldest
      let victim: string | undefined;
      for (const [key, b] of this.#breakers) {
        if (b.state === 'closed' && b.consecutiveFailures === 0) {
          victim = key;
          break;
        }
      }
      this.#breakers.delete(victim ?? this.#breakers.keys().next().value!);
    }
    breaker = new Breaker();
    this.#breakers.set(domain, breaker);
    return breaker;
  }

  #fallback(checks: readonly LimitCheck[]): Promise<PolicyAnswer> {
    this.#metrics.fallback();
    if (this.#policy === 'open') return Promise.resolve(OPEN);
    if (this.#policy === 'closed') return Promise.resolve(UNAVAILABLE);
    const startedAt = this.#now();
    const shared = this.#local === this.#primary ? checks : this.#shareOf(checks);
    return this.#local!.acquire(shared).then((decision): PolicyAnswer => {
      this.#metrics.decisionSeconds('local', (this.#now() - startedAt) / 1000);
      // an in-process primary is its own fallback: its decisions are the store's word
      return { kind: this.#local === this.#primary ? 'store' : 'fallback', decision };
    });
  }

  /** The checks with each limit's fair share of this gateway (N = the gateways sharing the limits). */
  #shareOf(checks: readonly LimitCheck[]): readonly LimitCheck[] {
    const gateways = Math.max(1, Math.floor(this.#gateways()));
    if (gateways === 1) return checks;
    return checks.map((check) => ({ ...check, spec: this.#shareSpec(check.spec, gateways) }));
  }

  #shareSpec(spec: LimitSpec, gateways: number): LimitSpec {
    const known = this.#shares.get(spec);
    if (known !== undefined && known.gateways === gateways) return known.spec;
    const share = algorithmOf(spec).fairShare(spec, gateways);
    this.#shares.set(spec, { gateways, spec: share });
    return share;
  }

  #onSuccess(breaker: Breaker, domain: string): void {
    breaker.consecutiveFailures = 0;
    breaker.probeInFlight = false;
    if (breaker.state !== 'closed') {
      this.#setState(breaker, 'closed');
      this.#log.info(
        { store: this.#primary.kind, ...(domain && { node: domain }) },
        'store answers again: decisions are back on the store',
      );
    }
  }

  #onFailure(breaker: Breaker, domain: string, error: unknown): void {
    const code = (error as { code?: string } | undefined)?.code;
    this.#metrics.storeError(code === 'STORE_TIMEOUT' ? 'timeout' : 'error');
    breaker.consecutiveFailures++;
    const wasProbe = breaker.state === 'half-open';
    breaker.probeInFlight = false;
    if (wasProbe || (breaker.state === 'closed' && breaker.consecutiveFailures >= FAILURES_TO_OPEN)) {
      breaker.probeAtMs = this.#now() + this.#coolDownMs;
      if (!wasProbe) {
        this.#log.error(
          { store: this.#primary.kind, ...(domain && { node: domain }), policy: this.#policy, err: error },
          `store failing: STORE_FAILURE=${this.#policy} decides until it answers again`,
        );
      }
      this.#setState(breaker, 'open');
    }
  }

  #setState(breaker: Breaker, state: BreakerState): void {
    if (breaker.state === state) return;
    breaker.state = state;
    let worst: BreakerState = 'closed';
    for (const b of this.#breakers.values()) {
      if (b.state === 'open') {
        worst = 'open';
        break;
      }
      if (b.state === 'half-open') worst = 'half-open';
    }
    if (worst === this.#reportedState) return;
    this.#reportedState = worst;
    this.#metrics.breakerState(STATE_VALUE[worst]);
  }
}
