/**
 * The gateway's limiter: the decision core (`@sluice/shared`, transport-free) with its collaborators
 * wired to this gateway — the primary store behind the store policy (circuit breakers,
 * STORE_FAILURE), the denial cache, the lease manager, the events bus — and its counters bound to
 * the gateway's metrics.
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
import type { FastifyBaseLogger } from 'fastify';
import type { GatewayConfig } from '../config/config.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';

/** A concurrency slot outlives the longest exchange (UPSTREAM_TIMEOUT_MS) by this much (docs/lifecycle.md), ms. */
export const SLOT_LEASE_MARGIN_MS = 5_000;

export interface Limiter {
  readonly core: DecisionCore;
  /** the primary store behind its breakers and failure policy */
  readonly store: GuardedStore;
  readonly events: LimiterEvents;
  readonly leases: LeaseManager;
  readonly denials: DenialCache;
}

export interface LimiterOptions {
  config: GatewayConfig;
  primary: Store;
  metrics: GatewayMetrics;
  log: FastifyBaseLogger;
  /** how long the store's circuit breaker stays open before probing, ms */
  storeCoolDownMs?: number;
  /** monotonic clock in ms (default `performance.now`) */
  now?: () => number;
  /** how many gateways share the limits (the heartbeat's count): the local fallback holds 1/N */
  gateways?: () => number;
  /** how long a slot outlives UPSTREAM_TIMEOUT_MS without a renewal, ms (default SLOT_LEASE_MARGIN_MS) */
  slotLeaseMarginMs?: number;
}

export function createLimiter({
  config,
  primary,
  metrics,
  log,
  storeCoolDownMs,
  now,
  gateways,
  slotLeaseMarginMs = SLOT_LEASE_MARGIN_MS,
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
  metrics.denialCacheSize = () => denials.size;
  const leases = new LeaseManager({ store, leaseMs: config.leaseMs, now });
  metrics.leaseTokensOutstanding = () => leases.outstandingTokens;
  const events = new LimiterEvents();
  events.onSettled(metrics.settlementCounter());
  const core = new DecisionCore({
    store,
    denials,
    leases,
    events,
    meter: metrics.decisionMeter(),
    now,
    slotLeaseMs: config.upstreamTimeoutMs + slotLeaseMarginMs,
    // slot ids are `<this gateway>:<counter>`: unique across gateways without a random number per request
    slotIdPrefix: `${randomUUID()}:`,
    secretKeys: new SecretClientKeys(config.clientKeySecret),
  });
  return { core, store, events, leases, denials };
}
