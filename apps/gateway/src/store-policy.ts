/**
 * The store as the request path sees it: the primary store (Redis) behind a circuit breaker, with
 * the `STORE_FAILURE` policy deciding whenever the store cannot (docs/configuration.md, `STORE_FAILURE`).
 *
 * - `local`: the same limiter engine in an in-process store of this gateway;
 * - `open`: admit (OPEN_DECISION);
 * - `closed`: refuse with 503 (UNAVAILABLE_DECISION).
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
import type { LimitCheck, SettledLimit, Settlement, Store, StoreDecision } from '@sluice/shared';
import type { FastifyBaseLogger } from 'fastify';
import type { StoreFailurePolicy } from './config.js';
import type { BreakerStateValue, GatewayMetrics } from './metrics.js';

/**
 * Admit without a decision (policy `open`): no limit was asked, so it has no outcomes and the
 * gateway sends no RateLimit header with it.
 */
export const OPEN_DECISION: StoreDecision = Object.freeze({
  allowed: true,
  limits: Object.freeze([]),
  deniedIndex: -1,
  retryAfterMs: 0,
});
/** Refuse with 503 (policy `closed`): no limit was asked, so no outcomes and no limit to blame. */
export const UNAVAILABLE_DECISION: StoreDecision = Object.freeze({
  allowed: false,
  limits: Object.freeze([]),
  deniedIndex: -1,
  retryAfterMs: 1000,
});

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
  /** the in-process store for policy `local` */
  local: Store | undefined;
  metrics: GatewayMetrics;
  log: FastifyBaseLogger;
  coolDownMs?: number;
  /** monotonic clock in ms (default `performance.now`); tests pass a fake one */
  now?: () => number;
}

export class GuardedStore {
  readonly #primary: Store;
  readonly #policy: StoreFailurePolicy;
  readonly #local: Store | undefined;
  readonly #metrics: GatewayMetrics;
  readonly #log: FastifyBaseLogger;
  readonly #coolDownMs: number;
  readonly #now: () => number;
  readonly #latencyPrimary;
  readonly #latencyLocal;
  readonly #fallbackCounter;
  readonly #errorsTimeout;
  readonly #errorsOther;
  readonly #acquireCalls;
  readonly #settleCalls;

  /** by failure domain ('' for a store of one domain) */
  readonly #breakers = new Map<string, Breaker>();
  #reportedState: BreakerState = 'closed';
  readonly #fallbackDecisions = new WeakSet<StoreDecision>();

  constructor(options: GuardedStoreOptions) {
    this.#primary = options.primary;
    this.#policy = options.policy;
    this.#local = options.local;
    this.#metrics = options.metrics;
    this.#log = options.log;
    this.#coolDownMs = options.coolDownMs ?? DEFAULT_COOL_DOWN_MS;
    this.#now = options.now ?? (() => performance.now());
    this.#latencyPrimary = options.metrics.decisionSeconds.labels(options.primary.kind);
    this.#latencyLocal = options.metrics.decisionSeconds.labels('local');
    this.#fallbackCounter = options.metrics.storeFallbacks.labels(options.policy);
    this.#errorsTimeout = options.metrics.storeErrors.labels('timeout');
    this.#errorsOther = options.metrics.storeErrors.labels('error');
    this.#acquireCalls = options.metrics.storeCalls.labels('acquire');
    this.#settleCalls = options.metrics.storeCalls.labels('settle');
    if (this.#policy === 'local' && this.#local === undefined) {
      throw new Error('STORE_FAILURE=local needs an in-process store');
    }
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
  acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    const domain = this.#primary.domainOf?.(checks) ?? '';
    const breaker = this.#breakerOf(domain);
    if (breaker.state !== 'closed') {
      if (breaker.probeInFlight || this.#now() < breaker.probeAtMs) return this.#fallback(checks);
      breaker.probeInFlight = true;
      this.#setState(breaker, 'half-open');
    }
    const startedAt = this.#now();
    this.#acquireCalls.inc();
    return this.#primary.acquire(checks).then(
      (decision) => {
        this.#latencyPrimary.observe((this.#now() - startedAt) / 1000);
        if (breaker.state !== 'closed' || breaker.consecutiveFailures !== 0) this.#onSuccess(breaker, domain);
        return decision;
      },
      (error: unknown) => {
        this.#onFailure(breaker, domain, error);
        return this.#fallback(checks);
      },
    );
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

  /**
   * The end of an exchange, on the store that took `decision` (the in-process one for a decision the
   * `local` policy took); nothing for a decision no store took (`open`, `closed`). It does not move the
   * breaker: a settlement that fails is lost (a slot then expires by itself), and admission decides
   * whether the store is healthy.
   */
  settle(decision: StoreDecision, settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    if (decision === OPEN_DECISION || decision === UNAVAILABLE_DECISION) return Promise.resolve([]);
    if (this.#fallbackDecisions.has(decision)) return this.#local!.settle(settlements);
    this.#settleCalls.inc();
    return this.#primary.settle(settlements);
  }

  async close(): Promise<void> {
    await this.#primary.close();
    if (this.#local !== this.#primary) await this.#local?.close();
  }

  #fallback(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    this.#fallbackCounter.inc();
    if (this.#policy === 'open') return Promise.resolve(OPEN_DECISION);
    if (this.#policy === 'closed') return Promise.resolve(UNAVAILABLE_DECISION);
    const startedAt = this.#now();
    return this.#local!.acquire(checks).then((decision) => {
      this.#latencyLocal.observe((this.#now() - startedAt) / 1000);
      if (this.#local !== this.#primary) this.#fallbackDecisions.add(decision);
      return decision;
    });
  }

  /**
   * True for a decision the failure policy took instead of the store. Its denials are not the store's
   * word, so the denial cache must not remember them past the store's return.
   */
  isFallback(decision: StoreDecision): boolean {
    return (
      decision === OPEN_DECISION || decision === UNAVAILABLE_DECISION || this.#fallbackDecisions.has(decision)
    );
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
    if (code === 'STORE_TIMEOUT') this.#errorsTimeout.inc();
    else this.#errorsOther.inc();
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
    this.#metrics.breakerState.set(STATE_VALUE[worst]);
  }
}
