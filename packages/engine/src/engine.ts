/**
 * The engine runtime: everything a front door needs to decide, built from an `EngineConfig`, a logger
 * and the front door's metrics — the rules source and its refresh, the primary store with its failure
 * policy (batching and lease mode inside), the decision core, the heartbeat, top offenders, usage and
 * the bearer-token verifier. A front door (the gateway's HTTP proxy; docs/engine.md shows a minimal
 * one) turns its requests into facts, asks `engine.core`, and answers; it never builds these itself.
 *
 *   const engine = createEngine(config, { logger });
 *   await engine.start();      // rules load in the background; the store gets a moment to connect
 *   await engine.ready();      // first rule set in force
 *   …engine.core.decide(…)…
 *   await engine.close();      // after the front door has stopped taking requests
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type DecisionCore,
  type DenialCache,
  type GuardedStore,
  type LeaseManager,
  type LimitCheck,
  type LimiterEvents,
  type LimitOutcome,
  type Store,
  TokenVerifier,
} from '@sluice/shared';
import type { EngineConfig } from './config.js';
import { GatewayHeartbeat } from './heartbeat.js';
import { createLimiter } from './limiter.js';
import { OffenderFlusher } from './offenders/flusher.js';
import { OffenderLog } from './offenders/offender-log.js';
import { createPrimaryStore } from './primary-store.js';
import { RulesCache } from './rules/rules-cache.js';
import type { RulesSource } from './rules/rules-source.js';
import { type EngineLogger, type EngineMetrics, noEngineMetrics } from './telemetry.js';

/** How long `start()` waits for the store's first connection before going on anyway, ms. */
export const STORE_CONNECT_WAIT_MS = 2_000;

/** What an engine can be given instead of what its configuration names (tests, embedders). */
export interface EngineDeps {
  logger: EngineLogger;
  /** the front door's metrics; default none */
  metrics?: EngineMetrics;
  /** the rules instead of the rules API at `rulesApiUrl` (`StaticRules`) */
  rules?: RulesSource;
  /** the primary store instead of the one the configuration names; closed with the engine */
  store?: Store;
  /** how long the store's circuit breaker stays open before probing, ms */
  storeCoolDownMs?: number;
  /** monotonic clock in ms for the breaker, leases and decision timing (default `performance.now`) */
  now?: () => number;
  /** how often top-offender counts go to the store, ms (default 5000); 0 = only on `offenders.flush()` and close */
  offendersFlushMs?: number;
  /** how often this engine beats in the store (the fair share's count), ms (default 1000); 0 = never */
  heartbeatMs?: number;
  /** at most one JWKS fetch per this many ms (default 30 s) */
  jwksCooldownMs?: number;
  /** a JWKS older than this is fetched again in the background, ms (default 10 min) */
  jwksMaxAgeMs?: number;
}

export interface Engine {
  readonly core: DecisionCore;
  /** the primary store behind its breakers and failure policy */
  readonly store: GuardedStore;
  readonly events: LimiterEvents;
  readonly leases: LeaseManager;
  readonly denials: DenialCache;
  readonly rules: RulesSource;
  /** undefined without `jwt` in the configuration: every request is unauthenticated */
  readonly verifier: TokenVerifier | undefined;
  /** top offenders: this engine's own counts, and their flush to the store's shared channels */
  readonly offenders: { readonly log: OffenderLog; flush(): Promise<void> };
  /** how many gateways share the limits now (the heartbeat's count; 1 without shared channels) */
  gateways(): number;
  /** each check's outcome now, charging nothing; rejects when the store cannot be read (or cannot peek) */
  peek(checks: readonly LimitCheck[]): Promise<LimitOutcome[]>;
  /** Starts loading rules and keys, gives the store a moment to connect, starts the background jobs. */
  start(): Promise<void>;
  /** Resolves once the first rule set is in force. */
  ready(): Promise<void>;
  /** Waits (at most `waitMs`) until every exchange holding concurrency slots has ended and given them back. */
  drain(waitMs: number): Promise<void>;
  /** Stops the jobs, gives unused lease tokens back, flushes offenders and closes the store. Idempotent. */
  close(): Promise<void>;
}

export function createEngine(config: EngineConfig, deps: EngineDeps): Engine {
  const log = deps.logger;
  const metrics = deps.metrics ?? noEngineMetrics();
  const primary = deps.store ?? createPrimaryStore(config, log);
  const shared = primary.shared;
  const heartbeat =
    shared &&
    new GatewayHeartbeat({
      shared,
      intervalMs: deps.heartbeatMs || undefined,
      logger: log,
      onCount: (gateways) => metrics.gatewaysCounted(gateways),
    });
  const limiter = createLimiter({
    config,
    primary,
    metrics,
    log,
    storeCoolDownMs: deps.storeCoolDownMs,
    now: deps.now,
    gateways: () => heartbeat?.gateways ?? 1,
  });
  const offenderLog = new OffenderLog();
  // bound, not wrapped: a denial then goes straight to the log, through no frame of this file
  limiter.events.onDenied(offenderLog.record.bind(offenderLog));
  const flusher =
    shared &&
    new OffenderFlusher({ log: offenderLog, shared, intervalMs: deps.offendersFlushMs, logger: log });
  const rules =
    deps.rules ??
    new RulesCache({
      rulesApiUrl: config.rulesApiUrl,
      token: config.rulesApiToken,
      refresh: config.rulesRefresh,
      fetchTimeoutMs: config.rulesFetchTimeoutMs,
      metrics,
      log,
    });
  const verifier = createVerifier(config, metrics, log, deps);
  if (config.clientKeySecret === undefined) {
    log.warn(
      'CLIENT_KEY_SECRET is not set: credential headers are keyed by their plain SHA-256, which anyone holding a guess can confirm',
    );
  }

  let closed: Promise<void> | undefined;
  return {
    ...limiter,
    rules,
    verifier,
    offenders: { log: offenderLog, flush: () => flusher?.flush() ?? Promise.resolve() },
    gateways: () => heartbeat?.gateways ?? 1,
    peek(checks) {
      if (primary.peek === undefined) {
        return Promise.reject(new Error(`a ${primary.kind} store cannot be read without charging`));
      }
      return primary.peek(checks);
    },
    async start() {
      rules.start((snapshot) => {
        if (snapshot.compiled.usesIdentity && verifier === undefined) {
          log.warn(
            { rulesVersion: snapshot.version },
            'rules use a verified identity (jwt, match.claims, match.authenticated) but neither JWT_JWKS_URL nor JWT_SECRET is set: every request counts as unauthenticated',
          );
        }
        limiter.core.setRules(snapshot.compiled);
        metrics.ruleSetInForce(snapshot.version, snapshot.compiled.size);
        metrics.rulesConfirmed(Date.now());
      });
      // ready without its keys: tokens count as unauthenticated until they come
      void verifier?.start();
      await waitForStore(primary, config, log);
      if (deps.heartbeatMs !== 0) heartbeat?.start();
      if (deps.offendersFlushMs !== 0) flusher?.start();
    },
    ready: () => rules.whenLoaded(),
    async drain(waitMs) {
      for (let waited = 0; limiter.core.runningSlotExchanges > 0 && waited < waitMs; waited += 10) {
        await sleep(10);
      }
    },
    close() {
      closed ??= (async () => {
        await rules.stop();
        await limiter.core.close(); // unused lease tokens back to the store while it is still open
        await flusher?.stop();
        await heartbeat?.stop();
        await limiter.store.close();
      })();
      return closed;
    },
  };
}

/** The bearer-token verifier `config.jwt` describes; undefined without it. */
function createVerifier(
  config: EngineConfig,
  metrics: EngineMetrics,
  log: EngineLogger,
  deps: EngineDeps,
): TokenVerifier | undefined {
  if (config.jwt === undefined) return undefined;
  return new TokenVerifier(config.jwt, {
    now: deps.now,
    jwksCooldownMs: deps.jwksCooldownMs,
    jwksMaxAgeMs: deps.jwksMaxAgeMs,
    onJwksLoaded: () => metrics.jwksFetched('ok'),
    onJwksError: (error) => {
      metrics.jwksFetched('error');
      log.warn(
        { err: error, jwksUrl: config.jwt?.jwksUrl },
        'the JWKS could not be fetched: bearer tokens it would verify count as unauthenticated until it can',
      );
    },
  });
}

/**
 * Gives the store a moment to connect, so the first requests are not decided by the failure policy.
 * A store that is down is not fatal: the policy decides until it comes back.
 */
async function waitForStore(primary: Store, config: EngineConfig, log: EngineLogger): Promise<void> {
  if (primary.ready === undefined) return;
  try {
    const readiness = await primary.ready(STORE_CONNECT_WAIT_MS);
    log[readiness.level](readiness.message);
  } catch (error) {
    log.warn(
      { err: error },
      `the rate limit store is not reachable: STORE_FAILURE=${config.storeFailure} decides until it is`,
    );
  }
}
