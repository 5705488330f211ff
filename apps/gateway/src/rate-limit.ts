/**
 * The onRequest hook: normalised target → rule → one client key per limit → one all-or-nothing
 * decision → headers → 429 or on to the proxy. It runs before Fastify reads any body, so a denied
 * request's body is never read or forwarded.
 *
 * Everything that depends only on the rule (policy header, header item names, the 429 bodies around
 * their number, metric children) is computed once per rule-set change in `setRuleSet`; per request
 * the hook does a trie lookup, builds one key per limit and asks the store (or the denial cache) once.
 * A v1 rule is one limit named "" (headers and 429 body exactly as before); a v2 rule has one item
 * per limit in its headers and names the first denying limit in its 429 body.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import {
  type CompiledCharge,
  type CompiledLimit,
  type CompiledRule,
  type CompiledRuleSet,
  headerItemName,
  type LimitCheck,
  type LimitSpec,
  limitKey,
  rateLimitHeader,
  retryAfterSeconds,
  type StoreDecision,
} from '@sluice/shared';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { Counter } from 'prom-client';
import { GLOBAL_CLIENT_KEY, headerClientKey, ipClientKey, socketIpKey } from './client-key.js';
import { type DenialCache, denialKey } from './denial-cache.js';
import { errorBody, GatewayError } from './errors.js';
import type { LimiterEvents } from './events.js';
import { Exchange, type SettleSink } from './exchange.js';
import { type LeaseManager, leaseRequestsOf } from './lease/lease-manager.js';
import type { GatewayMetrics, RequestCounterCell } from './metrics.js';
import { closeIfBodyPending, hostOf, markLimited, targetOf } from './proxy.js';
import type { RuleSetSnapshot } from './rules-cache.js';
import { type GuardedStore, OPEN_DECISION, UNAVAILABLE_DECISION } from './store-policy.js';

/** What the hook needs of one limit of a rule. */
interface LimitRuntime {
  /** '' for a v1 rule's single limit */
  readonly name: string;
  /**
   * the name in the store key: the limit's name, `<name>:slots` for a concurrency limit (a sorted set,
   * never under the key a string state of the same limit name had before an edit of its algorithm)
   */
  readonly keyName: string;
  readonly spec: LimitSpec;
  readonly cost: number;
  readonly clientBy: CompiledLimit['clientBy'];
  readonly clientHeader: string | undefined;
}

/** What the hook needs of one rule, computed once per rule-set change. */
interface RuleRuntime {
  readonly id: string;
  readonly name: string;
  readonly shadow: boolean;
  /** `unlimited: true`: matched requests are proxied without any limit */
  readonly unlimited: boolean;
  /** in the rule's order; empty when unlimited */
  readonly limits: readonly LimitRuntime[];
  readonly policyHeader: string;
  /** the RateLimit item name of each limit, in order */
  readonly headerItems: readonly string[];
  /** per limit: the 429 body up to its `retryAfter` number (a v2 body names the denying limit) */
  readonly denyBodyPrefixes: readonly string[];
  readonly unavailableBody: string;
  /** `charge`, compiled; undefined: the cost stands */
  readonly charge: CompiledCharge | undefined;
  readonly refundStatuses: ReadonlySet<number> | undefined;
  /** has a concurrency limit */
  readonly hasSlots: boolean;
  /** an admitted request needs an exchange (slots, charge or refund) */
  readonly settles: boolean;
  /** `mode: "lease"`: most requests one lease holds; 0 = decided exactly (see lease/lease-manager.ts) */
  readonly leaseRequests: number;
  readonly allowed: RequestCounterCell;
  readonly denied: RequestCounterCell;
  readonly shadowDenied: RequestCounterCell;
  readonly unavailable: RequestCounterCell;
  readonly unlimitedCell: RequestCounterCell;
}

const JSON_TYPE = 'application/json; charset=utf-8';

export interface RateLimiterOptions {
  store: GuardedStore;
  denials: DenialCache;
  metrics: GatewayMetrics;
  /** true when TRUST_PROXY lets forwarding headers name the client (then `request.ip` is used) */
  trustProxy: boolean;
  /** monotonic clock in ms for decision timing (default `performance.now`) */
  now?: () => number;
  /** how long a concurrency slot this gateway takes is held at most: UPSTREAM_TIMEOUT_MS + 5 s */
  slotLeaseMs: number;
  events: LimiterEvents;
  /** lease mode's local admissions; without it every rule decides exactly */
  leases?: LeaseManager;
}

export class RateLimiter {
  readonly #store: GuardedStore;
  readonly #denials: DenialCache;
  readonly #metrics: GatewayMetrics;
  readonly #trustProxy: boolean;
  readonly #now: () => number;
  readonly #events: LimiterEvents;
  readonly #unlimited: RequestCounterCell;
  readonly #cachedDenials: Counter;
  readonly #slotLeaseMs: number;
  readonly #settle: SettleSink;
  readonly #leases: LeaseManager | undefined;
  /** slot ids are `<this gateway>:<counter>`: unique across gateways without a random number per request */
  readonly #leasePrefix = `${randomUUID()}:`;
  #leaseCounter = 0;
  #rules: CompiledRuleSet | undefined;
  #runtimes = new Map<CompiledRule, RuleRuntime>();
  /** bumped on every rule-set change, so a decision for an old rule set is not remembered in the new one */
  #generation = 0;

  constructor(options: RateLimiterOptions) {
    this.#store = options.store;
    this.#denials = options.denials;
    this.#metrics = options.metrics;
    this.#trustProxy = options.trustProxy;
    this.#now = options.now ?? (() => performance.now());
    this.#events = options.events;
    this.#unlimited = options.metrics.requestCell('', 'unlimited');
    this.#cachedDenials = options.metrics.cachedDenials;
    this.#slotLeaseMs = options.slotLeaseMs;
    this.#leases = options.leases;
    const store = options.store;
    const events = options.events;
    this.#settle = (rule, kind, decision, settlements) => {
      store.settle(decision, settlements).then(
        () => events.settled({ rule, kind, ok: true }),
        () => events.settled({ rule, kind, ok: false }),
      );
    };
  }

  /** Swaps in a new rule set: precomputes its per-rule values and forgets every remembered denial. */
  setRuleSet(snapshot: RuleSetSnapshot): void {
    const runtimes = new Map<CompiledRule, RuleRuntime>();
    for (const rule of snapshot.compiled.rules) runtimes.set(rule, this.#runtimeOf(rule));
    this.#runtimes = runtimes;
    this.#rules = snapshot.compiled;
    this.#generation++;
    this.#denials.clear();
    this.#leases?.endAll();
  }

  /** Gives back every lease's unused tokens (after the last request, before the store closes). */
  close(): Promise<void> {
    return this.#leases?.close() ?? Promise.resolve();
  }

  /** Fastify onRequest hook. */
  readonly onRequest = (
    request: FastifyRequest,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void => {
    const raw = request.raw;
    const target = targetOf(raw);
    // `admitRequest` (proxy.ts) runs first and answers every unsafe target with a 400
    if (target === undefined || !target.ok) {
      done(new GatewayError('SLUICE_INTERNAL', 'request reached the limiter without a normalised target'));
      return;
    }
    const rules = this.#rules;
    if (rules === undefined) {
      this.#metrics.badRequests.labels('SLUICE_RULES_NOT_LOADED').inc();
      closeIfBodyPending(raw, reply);
      reply
        .code(503)
        .header('retry-after', '1')
        .send(errorBody('SLUICE_RULES_NOT_LOADED', 'the gateway has not loaded its rules yet'));
      return;
    }
    const compiled = rules.match({
      method: raw.method ?? '',
      // the host routing used (normalised once in rewriteTarget), never the raw header
      host: hostOf(raw),
      path: target.path,
      header: (name) => raw.headersDistinct[name],
      clientIp: () => (this.#trustProxy ? request.ip : raw.socket.remoteAddress),
    });
    if (compiled === undefined) {
      this.#unlimited.inc();
      proceed(raw, reply, done);
      return;
    }
    const rule = this.#runtimes.get(compiled)!;
    if (rule.unlimited) {
      rule.unlimitedCell.inc();
      proceed(raw, reply, done);
      return;
    }
    const checks: LimitCheck[] = [];
    // kept beside the checks: a denial names its limit's client key (top offenders)
    const clientKeys: string[] = [];
    for (const limit of rule.limits) {
      const clientKey = this.#clientKey(limit, request);
      clientKeys.push(clientKey);
      const key = limitKey('', rule.id, limit.keyName, clientKey);
      checks.push(
        limit.spec.algorithm === 'concurrency'
          ? { key, spec: limit.spec, cost: 1, leaseId: this.#leasePrefix + ++this.#leaseCounter }
          : { key, spec: limit.spec, cost: limit.cost },
      );
    }
    const cacheKey = denialKey(checks);
    markLimited(raw);

    const sentAtMs = this.#now();
    const cached = this.#denials.lookup(cacheKey, sentAtMs);
    if (cached !== undefined) {
      this.#cachedDenials.inc();
      this.#apply(rule, cached, checks, clientKeys, reply, done);
      return;
    }
    if (rule.leaseRequests > 0 && this.#leases !== undefined && this.#store.breakerState === 'closed') {
      const leased = this.#leases.take(cacheKey, checks, rule.leaseRequests);
      if (leased instanceof Promise) {
        leased
          .then((decision) => {
            if (decision !== undefined) this.#apply(rule, decision, checks, clientKeys, reply, done);
            else this.#decideExactly(rule, checks, clientKeys, cacheKey, sentAtMs, request, reply, done);
          })
          .catch((error: unknown) => {
            request.log.error({ err: error }, 'rate limit hook failed after its lease decision');
          });
        return;
      }
      if (leased !== undefined) {
        this.#apply(rule, leased, checks, clientKeys, reply, done);
        return;
      }
    }
    this.#decideExactly(rule, checks, clientKeys, cacheKey, sentAtMs, request, reply, done);
  };

  /** One store call for all of the request's checks; a store denial is remembered. */
  #decideExactly(
    rule: RuleRuntime,
    checks: readonly LimitCheck[],
    clientKeys: readonly string[],
    cacheKey: string,
    sentAtMs: number,
    request: FastifyRequest,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void {
    const generation = this.#generation;
    this.#store
      .acquire(checks)
      .then(
        (decision) => {
          if (
            !decision.allowed &&
            generation === this.#generation &&
            !this.#store.isFallback(decision) &&
            !(rule.hasSlots && slotDenied(checks, decision))
          ) {
            this.#denials.remember(cacheKey, decision, checks, sentAtMs);
          }
          this.#apply(rule, decision, checks, clientKeys, reply, done);
        },
        (error: unknown) => done(error as Error),
      )
      .catch((error: unknown) => {
        request.log.error({ err: error }, 'rate limit hook failed after its decision');
      });
  }

  #clientKey(limit: LimitRuntime, request: FastifyRequest): string {
    if (limit.clientBy === 'global') return GLOBAL_CLIENT_KEY;
    if (limit.clientBy === 'header') {
      return headerClientKey(request.raw.headers[limit.clientHeader!]) ?? this.#ipKey(request);
    }
    return this.#ipKey(request);
  }

  #ipKey(request: FastifyRequest): string {
    return this.#trustProxy ? ipClientKey(request.ip) : socketIpKey(request.raw.socket);
  }

  #apply(
    rule: RuleRuntime,
    decision: StoreDecision,
    checks: readonly LimitCheck[],
    clientKeys: readonly string[],
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void {
    const raw = reply.request.raw;
    reply.header('ratelimit-policy', rule.policyHeader);
    if (decision === UNAVAILABLE_DECISION) {
      rule.unavailable.inc();
      closeIfBodyPending(raw, reply);
      reply.code(503).header('retry-after', '1').type(JSON_TYPE).send(rule.unavailableBody);
      return;
    }
    if (decision !== OPEN_DECISION) reply.header('ratelimit', rateLimitHeader(rule.headerItems, decision));
    if (decision.allowed) {
      rule.allowed.inc();
      // charged by a store: its exchange settles at the end (a decision no store took has no limits)
      if (rule.settles && decision.limits.length > 0) this.#openExchange(rule, decision, checks, reply);
      proceed(raw, reply, done);
      return;
    }
    if (this.#events.denialsWatched) {
      const index = Math.max(decision.deniedIndex, 0);
      this.#events.denied({
        rule: rule.name,
        ruleId: rule.id,
        limit: rule.limits[index]?.name ?? '',
        clientKey: clientKeys[index] ?? '',
        shadow: rule.shadow,
      });
    }
    if (rule.shadow) {
      rule.shadowDenied.inc();
      proceed(raw, reply, done);
      return;
    }
    rule.denied.inc();
    const retryAfterSec = retryAfterSeconds(decision);
    closeIfBodyPending(raw, reply);
    reply
      .code(429)
      .header('retry-after', String(retryAfterSec))
      .type(JSON_TYPE)
      .send(`${rule.denyBodyPrefixes[decision.deniedIndex] ?? rule.denyBodyPrefixes[0]}${retryAfterSec}}`);
  }

  /** The admitted request's exchange: `end()` runs once its response is over, whichever way. */
  #openExchange(
    rule: RuleRuntime,
    decision: StoreDecision,
    checks: readonly LimitCheck[],
    reply: FastifyReply,
  ): void {
    const exchange = new Exchange(rule, checks, decision, this.#now(), this.#settle, this.#now);
    reply.request.exchange = exchange;
    const response = reply.raw;
    // the client may have gone while the store decided: 'close' has been emitted already
    if (response.closed) exchange.end();
    else response.once('close', () => exchange.end());
  }

  #runtimeOf(compiled: CompiledRule): RuleRuntime {
    const name = compiled.name;
    const metrics = this.#metrics;
    const message = `rate limit of rule "${name}" exceeded`;
    const hasSlots = compiled.limits.some((limit) => limit.spec.algorithm === 'concurrency');
    const leaseRequests = compiled.mode === 'lease' ? leaseRequestsOf(compiled.limits) : 0;
    const bodyStart = `{"statusCode":429,"error":"Too Many Requests","message":${JSON.stringify(message)},"rule":${JSON.stringify(name)},`;
    return {
      id: compiled.id,
      name,
      shadow: compiled.shadow,
      unlimited: compiled.unlimited,
      limits: compiled.limits.map((limit) => ({
        name: limit.name,
        keyName: limit.spec.algorithm === 'concurrency' ? `${limit.name}:slots` : limit.name,
        // the slot's expiry is this gateway's to set (docs/lifecycle.md)
        spec:
          limit.spec.algorithm === 'concurrency'
            ? Object.freeze({ ...limit.spec, leaseMs: this.#slotLeaseMs })
            : limit.spec,
        cost: limit.cost,
        clientBy: limit.clientBy,
        clientHeader: limit.clientHeader,
      })),
      policyHeader: compiled.policyHeader,
      headerItems: compiled.limits.map((limit) => headerItemName(name, limit.name)),
      denyBodyPrefixes: compiled.limits.map((limit) =>
        compiled.format === 1
          ? `${bodyStart}"retryAfter":`
          : `${bodyStart}"limit":${JSON.stringify(limit.name)},"retryAfter":`,
      ),
      charge: compiled.charge,
      refundStatuses: compiled.refundStatuses,
      hasSlots,
      settles: hasSlots || compiled.charge !== undefined || compiled.refundStatuses !== undefined,
      leaseRequests,
      unavailableBody: JSON.stringify(
        errorBody('SLUICE_STORE_UNAVAILABLE', `the rate limit store is unavailable (rule "${name}")`),
      ),
      allowed: metrics.requestCell(name, 'allowed'),
      denied: metrics.requestCell(name, 'denied'),
      shadowDenied: metrics.requestCell(name, 'shadow_denied'),
      unavailable: metrics.requestCell(name, 'unavailable'),
      unlimitedCell: metrics.requestCell(name, 'unlimited'),
    };
  }
}

/** A concurrency limit denied: never remembered, since a slot may come back any moment. */
function slotDenied(checks: readonly LimitCheck[], decision: StoreDecision): boolean {
  for (let i = 0; i < checks.length; i++) {
    if (checks[i]!.spec.algorithm === 'concurrency' && !decision.limits[i]!.allowed) return true;
  }
  return false;
}

/**
 * On to the proxy. A client that asked `Expect: 100-continue` is told to send its body only now,
 * once admitted (the server re-emits such requests without answering them, see app.ts).
 */
function proceed(raw: IncomingMessage, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  if (raw.headers.expect !== undefined && raw.headers.expect.toLowerCase() === '100-continue') {
    reply.raw.writeContinue();
  }
  done();
}
