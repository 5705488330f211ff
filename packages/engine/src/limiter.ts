/**
 * The limiter a front door decides with: the decision core (`@sluice/shared`, transport-free) with
 * its collaborators — the primary store behind the store policy (circuit breakers, STORE_FAILURE),
 * the denial cache, the lease manager, the events bus — and its counters bound to the front door's
 * metrics.
 */
import { randomUUID } from 'node:crypto';
import {
  DecisionCore,
  DenialCache,
  GuardedStore,
  LeaseManager,
  LimiterEvents,
  MemoryStore,
  SecretClientKeys,
  type Store,
} from '@sluice/shared';
import type { EngineConfig } from './config.js';
import type { EngineLogger, EngineMetrics } from './telemetry.js';

export interface Limiter {
  readonly core: DecisionCore;
  /** the primary store behind its breakers and failure policy */
  readonly store: GuardedStore;
  readonly events: LimiterEvents;
  readonly leases: LeaseManager;
  readonly denials: DenialCache;
}

export interface LimiterOptions {
  config: EngineConfig;
  primary: Store;
  metrics: EngineMetrics;
  log: EngineLogger;
  /** how long the store's circuit breaker stays open before probing, ms */
  storeCoolDownMs?: number;
  /** monotonic clock in ms (default `performance.now`) */
  now?: () => number;
  /** how many gateways share the limits (the heartbeat's count): the local fallback holds 1/N */
  gateways?: () => number;
}

export function createLimiter({
  config,
  primary,
  metrics,
  log,
  storeCoolDownMs,
  now,
  gateways,
}: LimiterOptions): Limiter {
  const store = new GuardedStore({
    primary,
    policy: config.storeFailure,
    // an in-process primary cannot fail, so it is its own fallback
    local:
      primary.kind === 'memory'
        ? primary
        : config.storeFailure === 'local'
          ? new MemoryStore({ maxKeys: config.localStoreMaxKeys })
          : undefined,
    metrics: metrics.storePolicyMetrics(primary.kind, config.storeFailure),
    log,
    coolDownMs: storeCoolDownMs,
    now,
    gateways,
  });
  const denials = new DenialCache(config.denialCacheSize);
  const leases = new LeaseManager({ store, leaseMs: config.leaseMs, now });
  metrics.observe({
    denialCacheSize: () => denials.size,
    leaseTokensOutstanding: () => leases.outstandingTokens,
  });
  const events = new LimiterEvents();
  events.onSettled(metrics.settlementCounter());
  const core = new DecisionCore({
    store,
    denials,
    leases,
    events,
    meter: metrics.decisionMeter(),
    now,
    slotLeaseMs: config.slotLeaseMs,
    // slot ids are `<this gateway>:<counter>`: unique across gateways without a random number per request
    slotIdPrefix: `${randomUUID()}:`,
    secretKeys: new SecretClientKeys(config.clientKeySecret),
  });
  return { core, store, events, leases, denials };
}
