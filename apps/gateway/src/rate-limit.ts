/**
 * The onRequest hook (SPEC §4): normalised target → rule → client key → decision → headers →
 * 429 or on to the proxy. It runs before Fastify reads any body, so a denied request's body is
 * never read or forwarded.
 *
 * Everything that depends only on the rule (policy header, header prefixes, the 429 body around its
 * number, metric children) is computed once per rule-set change in `setRuleSet`; per request the
 * hook does a trie lookup, builds one key string and asks the store (or the denial cache).
 */
import type { IncomingMessage } from 'node:http';
import {
  bucketKey,
  type CompiledRule,
  type CompiledRuleSet,
  type Decision,
  type NormalizedTarget,
} from '@sluice/shared';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { Counter } from 'prom-client';
import { GLOBAL_CLIENT_KEY, headerClientKey, ipClientKey, socketIpKey } from './client-key.js';
import type { DenialCache } from './denial-cache.js';
import { errorBody } from './errors.js';
import type { GatewayMetrics, RequestCounterCell } from './metrics.js';
import { hostOf, markLimited, targetOf } from './proxy.js';
import type { RuleSetSnapshot } from './rules-cache.js';
import { type GuardedStore, OPEN_DECISION, UNAVAILABLE_DECISION } from './store-policy.js';

/** What the hook needs of one rule, computed once per rule-set change. */
interface RuleRuntime {
  readonly id: string;
  readonly name: string;
  readonly shadow: boolean;
  readonly limits: CompiledRule['limits'];
  readonly cost: number;
  readonly clientBy: CompiledRule['clientBy'];
  readonly clientHeader: string | undefined;
  readonly policyHeader: string;
  /** `"<name>";r=` */
  readonly rateLimitPrefix: string;
  /** the 429 body up to its `retryAfter` number */
  readonly denyBodyPrefix: string;
  readonly unavailableBody: string;
  readonly allowed: RequestCounterCell;
  readonly denied: RequestCounterCell;
  readonly shadowDenied: RequestCounterCell;
  readonly unavailable: RequestCounterCell;
}

const JSON_TYPE = 'application/json; charset=utf-8';

export interface RateLimiterOptions {
  store: GuardedStore;
  denials: DenialCache;
  metrics: GatewayMetrics;
  /** true when TRUST_PROXY lets forwarding headers name the client (then `request.ip` is used) */
  trustProxy: boolean;
  bodyLimitBytes: number;
  /** monotonic clock in ms for decision timing (default `performance.now`) */
  now?: () => number;
}

export class RateLimiter {
  readonly #store: GuardedStore;
  readonly #denials: DenialCache;
  readonly #metrics: GatewayMetrics;
  readonly #trustProxy: boolean;
  readonly #bodyLimitBytes: number;
  readonly #now: () => number;
  readonly #unlimited: RequestCounterCell;
  readonly #cachedDenials: Counter;
  #rules: CompiledRuleSet | undefined;
  #runtimes = new Map<CompiledRule, RuleRuntime>();
  /** bumped on every rule-set change, so a decision for an old rule set is not remembered in the new one */
  #generation = 0;

  constructor(options: RateLimiterOptions) {
    this.#store = options.store;
    this.#denials = options.denials;
    this.#metrics = options.metrics;
    this.#trustProxy = options.trustProxy;
    this.#bodyLimitBytes = options.bodyLimitBytes;
    this.#now = options.now ?? (() => performance.now());
    this.#unlimited = options.metrics.requestCell('', 'unlimited');
    this.#cachedDenials = options.metrics.cachedDenials;
  }

  /** Swaps in a new rule set: precomputes its per-rule values and forgets every remembered denial. */
  setRuleSet(snapshot: RuleSetSnapshot): void {
    const runtimes = new Map<CompiledRule, RuleRuntime>();
    for (const rule of snapshot.compiled.rules) runtimes.set(rule, this.#runtimeOf(rule));
    this.#runtimes = runtimes;
    this.#rules = snapshot.compiled;
    this.#generation++;
    this.#denials.clear();
  }

  /** Fastify onRequest hook. */
  readonly onRequest = (
    request: FastifyRequest,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void => {
    const raw = request.raw;
    const target = targetOf(raw);
    if (target === undefined || !target.ok) {
      this.#badTarget(reply, target);
      return;
    }
    const contentLength = raw.headers['content-length'];
    if (contentLength !== undefined && Number(contentLength) > this.#bodyLimitBytes) {
      this.#metrics.badRequests.labels('SLUICE_BODY_TOO_LARGE').inc();
      reply
        .code(413)
        .header('connection', 'close')
        .send(
          errorBody('SLUICE_BODY_TOO_LARGE', `request body is larger than ${this.#bodyLimitBytes} bytes`),
        );
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
    // the host routing used (normalised once in rewriteTarget), never the raw header
    const compiled = rules.match({ method: raw.method ?? '', host: hostOf(raw), path: target.path });
    if (compiled === undefined) {
      this.#unlimited.inc();
      proceed(raw, reply, done);
      return;
    }
    const rule = this.#runtimes.get(compiled)!;
    let clientKey: string;
    if (rule.clientBy === 'global') clientKey = GLOBAL_CLIENT_KEY;
    else if (rule.clientBy === 'header') {
      clientKey = headerClientKey(raw.headers[rule.clientHeader!]) ?? this.#ipKey(request);
    } else clientKey = this.#ipKey(request);
    const key = bucketKey('', rule.id, clientKey);
    markLimited(raw);

    const sentAtMs = this.#now();
    const cached = this.#denials.lookup(key, sentAtMs);
    if (cached !== undefined) {
      this.#cachedDenials.inc();
      this.#apply(rule, cached, raw, reply, done);
      return;
    }
    const generation = this.#generation;
    this.#store
      .decide({ key, limits: rule.limits, cost: rule.cost })
      .then(
        (decision) => {
          if (!decision.allowed && generation === this.#generation && !this.#store.isFallback(decision)) {
            this.#denials.remember(key, decision, rule.limits, sentAtMs);
          }
          this.#apply(rule, decision, raw, reply, done);
        },
        (error: unknown) => done(error as Error),
      )
      .catch((error: unknown) => {
        request.log.error({ err: error }, 'rate limit hook failed after its decision');
      });
  };

  #ipKey(request: FastifyRequest): string {
    return this.#trustProxy ? ipClientKey(request.ip) : socketIpKey(request.raw.socket);
  }

  #apply(
    rule: RuleRuntime,
    decision: Decision,
    raw: IncomingMessage,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void {
    reply.header('ratelimit-policy', rule.policyHeader);
    if (decision === UNAVAILABLE_DECISION) {
      rule.unavailable.inc();
      closeIfBodyPending(raw, reply);
      reply.code(503).header('retry-after', '1').type(JSON_TYPE).send(rule.unavailableBody);
      return;
    }
    if (decision !== OPEN_DECISION) {
      const remaining = decision.balance > 0 ? Math.floor(decision.balance) : 0;
      reply.header(
        'ratelimit',
        `${rule.rateLimitPrefix}${remaining};t=${Math.ceil(decision.fullInMs / 1000)}`,
      );
    }
    if (decision.allowed) {
      rule.allowed.inc();
      proceed(raw, reply, done);
      return;
    }
    if (rule.shadow) {
      rule.shadowDenied.inc();
      proceed(raw, reply, done);
      return;
    }
    rule.denied.inc();
    const retryAfterSec = decision.retryAfterMs > 1000 ? Math.ceil(decision.retryAfterMs / 1000) : 1;
    closeIfBodyPending(raw, reply);
    reply
      .code(429)
      .header('retry-after', String(retryAfterSec))
      .type(JSON_TYPE)
      .send(`${rule.denyBodyPrefix}${retryAfterSec}}`);
  }

  #badTarget(reply: FastifyReply, target: NormalizedTarget | undefined): void {
    const code = target && !target.ok ? target.code : 'PATH_NOT_ORIGIN_FORM';
    const message = target && !target.ok ? target.message : 'request-target could not be read';
    this.#metrics.badRequests.labels(code).inc();
    closeIfBodyPending(reply.request.raw, reply);
    reply.code(400).send({ ...errorBody('SLUICE_BAD_PATH', message), reason: code });
  }

  #runtimeOf(compiled: CompiledRule): RuleRuntime {
    const name = compiled.name;
    const metrics = this.#metrics;
    const message = `rate limit of rule "${name}" exceeded`;
    return {
      id: compiled.id,
      name,
      shadow: compiled.shadow,
      limits: compiled.limits,
      cost: compiled.cost,
      clientBy: compiled.clientBy,
      clientHeader: compiled.clientHeader,
      policyHeader: compiled.policyHeader,
      rateLimitPrefix: `"${name}";r=`,
      denyBodyPrefix: `{"statusCode":429,"error":"Too Many Requests","message":${JSON.stringify(message)},"rule":${JSON.stringify(name)},"retryAfter":`,
      unavailableBody: JSON.stringify(
        errorBody('SLUICE_STORE_UNAVAILABLE', `the rate limit store is unavailable (rule "${name}")`),
      ),
      allowed: metrics.requestCell(name, 'allowed'),
      denied: metrics.requestCell(name, 'denied'),
      shadowDenied: metrics.requestCell(name, 'shadow_denied'),
      unavailable: metrics.requestCell(name, 'unavailable'),
    };
  }
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

/**
 * A refused request may still be sending its body. It is never read: the connection is closed after
 * the answer instead of being kept alive behind a body nobody wants.
 */
function closeIfBodyPending(raw: IncomingMessage, reply: FastifyReply): void {
  if (raw.complete) return;
  const headers = raw.headers;
  if (headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0') {
    reply.header('connection', 'close');
  }
}
