/**
 * The decision core: given the facts of one request and the compiled rule set, one `Decision`.
 * No HTTP here (no Fastify, Node HTTP or socket types; layers.test.ts checks the imports):
 * every front door — the gateway's proxy hook, explain, a WebSocket handshake — is an adapter that
 * builds `RequestFacts` and reads the `Decision`.
 *
 *   facts → rule (compiled matcher) → one client key per limit → checks
 *         → denial cache | lease | store policy (store, local fallback, open, closed)
 *         → Decision (counted, a denial remembered and announced, an admission's exchange opened)
 *
 * The collaborators are passed in: the store policy (`GuardedStore`, or any `DecisionStore`), the
 * denial cache, the lease manager, the events bus, the meter, a monotonic clock. Without a store the
 * core can only preview (`decide(facts, { charge: false })`: what explain shows).
 */
import { GLOBAL_CLIENT_KEY, headerClientKey, ipClientKey } from '../http/client-key.js';
import { jwtClientKey } from '../identity/claims.js';
import { SecretClientKeys } from '../identity/secret-keys.js';
import {
  type LimitCheck,
  type LimitOutcome,
  limitKey,
  type Settlement,
  type StoreDecision,
} from '../limiter/limits.js';
import type { CompiledRule, CompiledRuleSet } from '../rules/match.js';
import {
  type Decision,
  type LimitedDecision,
  type LimitedSource,
  NO_RULE,
  NOT_READY,
  type PreviewDecision,
} from './decision.js';
import { type DenialCache, denialKey } from './denial-cache.js';
import type { LimiterEvents } from './events.js';
import { Exchange, type SettlementKind, type SettleSink } from './exchange.js';
import type { RequestFacts } from './facts.js';
import type { LeaseManager } from './lease-manager.js';
import { type DecisionMeter, NO_METER, planRule, type RulePlan } from './rule-plan.js';
import { SlotKeeper } from './slot-keeper.js';
import type { DecidedBy, PolicyAnswer } from './store-policy.js';

/** What the core needs of a store: the store policy (`GuardedStore`) has exactly this. */
export interface DecisionStore {
  acquire(checks: readonly LimitCheck[]): Promise<PolicyAnswer>;
  settle(by: DecidedBy, settlements: readonly Settlement[]): Promise<unknown>;
  /** the worst circuit-breaker state: lease mode only leases while the store is healthy */
  readonly breakerState: 'closed' | 'open' | 'half-open';
}

export interface DecisionCoreOptions {
  /** where decisions are taken; absent: the core can only preview (explain) */
  store?: DecisionStore;
  /** denials remembered locally, so a client hammering a denied limit costs no store call */
  denials?: DenialCache;
  /** lease mode's local admissions; absent: every rule decides exactly */
  leases?: LeaseManager;
  /** denials and settlements, for subscribers (top offenders, metrics) */
  events?: LimiterEvents;
  /** decision counters per rule */
  meter?: DecisionMeter;
  /** monotonic clock in ms (default `performance.now`) */
  now?: () => number;
  /**
   * how long a concurrency slot this core takes lives without a renewal, ms (UPSTREAM_TIMEOUT_MS + 5 s);
   * the core renews the slots of running exchanges before that (`SlotKeeper`)
   */
  slotLeaseMs?: number;
  /** the start of every slot id this core hands out: unique per gateway (a random id) */
  slotIdPrefix?: string;
  /** how credential headers are keyed (CLIENT_KEY_SECRET); default: plain SHA-256 */
  secretKeys?: SecretClientKeys;
}

/** `decide(facts, PREVIEW)`: what the request would be decided on, charging nothing. */
export const PREVIEW = Object.freeze({ charge: false as const });

export class DecisionCore implements SettleSink {
  readonly #store: DecisionStore | undefined;
  readonly #denials: DenialCache | undefined;
  readonly #leases: LeaseManager | undefined;
  readonly #events: LimiterEvents | undefined;
  readonly #meter: DecisionMeter;
  readonly #now: () => number;
  readonly #slotLeaseMs: number | undefined;
  readonly #slotIdPrefix: string;
  readonly #secretKeys: SecretClientKeys;
  /** renews the slots of running exchanges; absent without `slotLeaseMs` (slots then keep the rule's own) */
  readonly #slots: SlotKeeper | undefined;
  #slotCounter = 0;
  /** exchanges opened and not ended yet */
  #openExchanges = 0;
  /** settlements sent to the store and not answered yet */
  #settling = 0;
  /** callers of `settled()` waiting for both counts to reach 0; made on first use */
  #idleWaiters: (() => void)[] | undefined;
  #rules: CompiledRuleSet | undefined;
  /** per rule, by `CompiledRule.index` */
  #plans: readonly RulePlan[] = [];
  #noRule = NO_METER.requests('').unlimited;
  /** bumped on every rule-set change, so a decision for an old rule set is not remembered in the new one */
  #generation = 0;

  constructor(options: DecisionCoreOptions = {}) {
    this.#store = options.store;
    this.#denials = options.denials;
    this.#leases = options.leases;
    this.#events = options.events;
    this.#meter = options.meter ?? NO_METER;
    this.#now = options.now ?? (() => performance.now());
    this.#slotLeaseMs = options.slotLeaseMs;
    this.#slotIdPrefix = options.slotIdPrefix ?? 'slot:';
    this.#secretKeys = options.secretKeys ?? new SecretClientKeys(undefined);
    this.#slots =
      options.slotLeaseMs === undefined ? undefined : new SlotKeeper(options.slotLeaseMs, this.#now);
    this.#noRule = this.#meter.requests('').unlimited;
  }

  /** How this core keys credential headers (usage lookups hash a raw value the same way). */
  get secretKeys(): SecretClientKeys {
    return this.#secretKeys;
  }

  /** The rule set in force, or undefined before the first one. */
  get rules(): CompiledRuleSet | undefined {
    return this.#rules;
  }

  /** Swaps in a new rule set: plans its rules, forgets every remembered denial, ends every lease. */
  setRules(rules: CompiledRuleSet): void {
    this.#plans = rules.rules.map((compiled) =>
      planRule(compiled, { slotLeaseMs: this.#slotLeaseMs, meter: this.#meter, events: this.#events }),
    );
    this.#rules = rules;
    this.#generation++;
    this.#denials?.clear();
    this.#leases?.endAll();
  }

  /** The plan of a rule of the current set (admin lookups by name go through `rules.rules`). */
  planOf(rule: CompiledRule): RulePlan {
    return this.#plans[rule.index]!;
  }

  /**
   * The decision for one request. Synchronous when no store call is needed (no rule, unlimited, a
   * cached denial, a lease in hand); a promise when the store decides. With `{ charge: false }` it
   * stops before anything is charged and answers a `preview` (always synchronously).
   */
  decide(facts: RequestFacts, options: typeof PREVIEW): Exclude<Decision, Promise<Decision>>;
  decide(facts: RequestFacts, options?: { charge?: boolean }): Decision | Promise<Decision>;
  decide(facts: RequestFacts, options?: { charge?: boolean }): Decision | Promise<Decision> {
    const rules = this.#rules;
    if (rules === undefined) return NOT_READY;
    const compiled = rules.match(facts);
    if (compiled === undefined) {
      this.#noRule.inc();
      return NO_RULE;
    }
    const plan = this.#plans[compiled.index]!;
    if (plan.unlimited) {
      plan.counters.unlimited.inc();
      return plan.asUnlimited;
    }
    const limits = plan.limits;
    const checks: LimitCheck[] = new Array(limits.length);
    // kept beside the checks: a denial names its limit's client key (top offenders)
    const clientKeys: string[] = new Array(limits.length);
    let ipKey: string | undefined;
    for (let i = 0; i < limits.length; i++) {
      const limit = limits[i]!;
      let clientKey: string | undefined;
      if (limit.clientBy === 'global') clientKey = GLOBAL_CLIENT_KEY;
      else if (limit.clientBy === 'header') {
        const value = facts.joinedHeader(limit.clientHeader!);
        // a credential is never written in clear, not even in a store key
        clientKey = limit.clientSecret ? this.#secretKeys.clientKey(value) : headerClientKey(value);
      } else if (limit.clientBy === 'jwt') clientKey = jwtClientKey(facts.claims?.(), limit.clientClaim!);
      clientKey ??= ipKey ??= ipClientKey(facts.clientIp());
      clientKeys[i] = clientKey;
      // no prefix: the store adds its own
      const key = limitKey('', plan.id, limit.keyName, clientKey);
      checks[i] = limit.slots
        ? { key, spec: limit.spec, cost: 1, leaseId: this.#slotIdPrefix + ++this.#slotCounter }
        : { key, spec: limit.spec, cost: limit.cost };
    }
    if (options?.charge === false) {
      const preview: PreviewDecision = { kind: 'preview', rule: plan, clientKeys };
      return preview;
    }
    const store = this.#store;
    if (store === undefined) throw new Error('a decision core without a store can only preview');

    const cacheKey = denialKey(checks);
    const sentAtMs = this.#now();
    const cached = this.#denials?.lookup(cacheKey, sentAtMs);
    if (cached !== undefined) {
      this.#meter.cachedDenials.inc();
      return this.#limited(plan, 'cache', cached, checks, clientKeys, sentAtMs);
    }
    const leases = this.#leases;
    if (plan.leaseRequests > 0 && leases !== undefined && store.breakerState === 'closed') {
      const leased = leases.take(cacheKey, checks, plan.leaseRequests);
      if (leased instanceof Promise) {
        return leased.then((decision) =>
          decision !== undefined
            ? this.#limited(plan, 'lease', decision, checks, clientKeys, sentAtMs)
            : this.#decideOnStore(store, plan, checks, clientKeys, cacheKey, sentAtMs),
        );
      }
      if (leased !== undefined) return this.#limited(plan, 'lease', leased, checks, clientKeys, sentAtMs);
    }
    return this.#decideOnStore(store, plan, checks, clientKeys, cacheKey, sentAtMs);
  }

  /**
   * Renews the slots of every running exchange due (its timer does this by itself, about every sixth
   * of the slot lifetime); returns how many exchanges were renewed.
   */
  renewSlots(): number {
    return this.#slots?.renewDue() ?? 0;
  }

  /** Exchanges holding slots now. */
  get runningSlotExchanges(): number {
    return this.#slots?.size ?? 0;
  }

  /**
   * Gives back every lease's unused tokens and stops renewing slots (after the last request, before
   * the store closes).
   */
  close(): Promise<void> {
    this.#slots?.close();
    return this.#leases?.close() ?? Promise.resolve();
  }

  /** The exchange of an admitted request ended (or reached its response): settle on its store. */
  settle(exchange: Exchange, kind: SettlementKind, settlements: readonly Settlement[]): void {
    if (exchange.ended) this.#slots?.release(exchange);
    const report = exchange.rule.settledReports[kind];
    this.#settling++;
    exchange.settlementSent();
    this.#store!.settle(exchange.decidedBy, settlements).then(
      () => {
        report.ok();
        this.#answered(exchange);
      },
      () => {
        report.failed();
        this.#answered(exchange);
      },
    );
  }

  ended(_exchange: Exchange): void {
    this.#openExchanges--;
    this.#wakeIfIdle();
  }

  /**
   * Resolves once every exchange opened so far has ended and the store has answered every settlement
   * sent (slots given back, costs charged or refunded). A test or a drain awaits this instead of
   * sleeping; with nobody waiting it costs two counters per exchange.
   */
  settled(): Promise<void> {
    if (this.#openExchanges === 0 && this.#settling === 0) return Promise.resolve();
    this.#idleWaiters ??= [];
    const waiters = this.#idleWaiters;
    return new Promise((resolve) => {
      waiters.push(resolve);
    });
  }

  #answered(exchange: Exchange): void {
    this.#settling--;
    exchange.settlementAnswered();
    this.#wakeIfIdle();
  }

  #wakeIfIdle(): void {
    if (this.#idleWaiters === undefined || this.#openExchanges !== 0 || this.#settling !== 0) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = undefined;
    for (const wake of waiters) wake();
  }

  /** One store call for all of the request's checks; a store denial is remembered. */
  #decideOnStore(
    store: DecisionStore,
    plan: RulePlan,
    checks: readonly LimitCheck[],
    clientKeys: readonly string[],
    cacheKey: string,
    sentAtMs: number,
  ): Promise<Decision> {
    const generation = this.#generation;
    return store.acquire(checks).then((answer): Decision => {
      switch (answer.kind) {
        case 'open':
          plan.counters.allowed.inc();
          return plan.asOpen;
        case 'unavailable':
          plan.counters.unavailable.inc();
          return plan.asUnavailable;
        case 'fallback':
          return this.#limited(plan, 'fallback', answer.decision, checks, clientKeys, sentAtMs);
        case 'store': {
          const decision = answer.decision;
          if (
            !decision.allowed &&
            generation === this.#generation &&
            !(plan.hasSlots && slotDenied(checks, decision))
          ) {
            this.#denials?.remember(cacheKey, decision, checks, sentAtMs);
          }
          return this.#limited(plan, 'store', decision, checks, clientKeys, sentAtMs);
        }
      }
    });
  }

  /** A decision every limit took part in: counted, a denial announced, an admission's exchange opened. */
  #limited(
    plan: RulePlan,
    source: LimitedSource,
    decision: StoreDecision,
    checks: readonly LimitCheck[],
    clientKeys: readonly string[],
    admittedAtMs: number,
  ): LimitedDecision {
    let exchange: Exchange | undefined;
    if (decision.allowed) {
      plan.counters.allowed.inc();
      if (plan.settles) {
        exchange = new Exchange(
          plan,
          checks,
          source === 'fallback' ? 'fallback' : 'store',
          decision.atMs ?? 0,
          admittedAtMs,
          this,
          this.#now,
        );
        this.#openExchanges++;
        if (plan.hasSlots) this.#slots?.hold(exchange);
      }
    } else {
      if (plan.shadow) plan.counters.shadowDenied.inc();
      else plan.counters.denied.inc();
      const events = this.#events;
      if (events?.denialsWatched) {
        const index = Math.max(decision.deniedIndex, 0);
        events.denied({
          rule: plan.name,
          ruleId: plan.id,
          limit: plan.limits[index]?.name ?? '',
          clientKey: clientKeys[index] ?? '',
          shadow: plan.shadow,
        });
      }
    }
    return {
      kind: 'limited',
      source,
      rule: plan,
      allowed: decision.allowed,
      refused: !decision.allowed && !plan.shadow,
      limits: decision.limits as readonly LimitOutcome[],
      deniedIndex: decision.deniedIndex,
      retryAfterMs: decision.retryAfterMs,
      clientKeys,
      exchange,
    };
  }
}

/** A limit holding slots denied: never remembered, since a slot may come back any moment. */
function slotDenied(checks: readonly LimitCheck[], decision: StoreDecision): boolean {
  for (let i = 0; i < checks.length; i++) {
    if (checks[i]!.leaseId !== undefined && !decision.limits[i]!.allowed) return true;
  }
  return false;
}
