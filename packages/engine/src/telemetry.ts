/**
 * What the engine reports, and to whom: a logger (pino's call shape, so a Fastify or pino logger is one
 * as it is) and the metrics a front door keeps. The engine imports no metrics library: each front
 * door binds these calls to its own registry (the gateway's `GatewayMetrics`), and a front door
 * without metrics passes nothing.
 */
import type { DecisionMeter, SettlementKind, StorePolicyMetrics } from '@sluice/shared';

export interface EngineLogFn {
  (message: string): void;
  (fields: object, message?: string): void;
}

export interface EngineLogger {
  trace: EngineLogFn;
  debug: EngineLogFn;
  info: EngineLogFn;
  warn: EngineLogFn;
  error: EngineLogFn;
}

/** Why a rules load failed, as `sluice_rules_refresh_failures_total` labels it. */
export type RulesFailureReason = 'unreachable' | 'status' | 'invalid';

export interface EngineMetrics {
  /** the store policy's counters, bound once for the primary store's kind and the failure policy */
  storePolicyMetrics(primary: 'redis' | 'memory', policy: 'closed' | 'open' | 'local'): StorePolicyMetrics;
  /** the decision core's request counters */
  decisionMeter(): DecisionMeter;
  /** counts each settlement the core reports */
  settlementCounter(): (event: { kind: SettlementKind; ok: boolean }) => void;
  /** gauges the front door reads when it is scraped */
  observe(gauges: { denialCacheSize: () => number; leaseTokensOutstanding: () => number }): void;
  /** the heartbeat's count of gateways sharing the limits (the local fallback's share is 1/N) */
  gatewaysCounted(gateways: number): void;
  jwksFetched(outcome: 'ok' | 'error'): void;
  rulesRefreshFailed(reason: RulesFailureReason): void;
  /** the rules source confirmed (or changed) the rule set in force, at `atMs` (wall clock) */
  rulesConfirmed(atMs: number): void;
  /** a new rule set is in force */
  ruleSetInForce(version: number, rules: number): void;
}

/** For a front door that keeps no metrics (tests, embedders). */
export function noEngineMetrics(): EngineMetrics {
  const nothing = () => {};
  return {
    storePolicyMetrics: () => ({
      decisionSeconds: nothing,
      fallback: nothing,
      storeError: nothing,
      storeCall: nothing,
      breakerState: nothing,
    }),
    decisionMeter: () => {
      const cell = { inc: nothing };
      return {
        requests: () => ({
          allowed: cell,
          denied: cell,
          shadowDenied: cell,
          unavailable: cell,
          unlimited: cell,
        }),
        cachedDenials: cell,
      };
    },
    settlementCounter: () => nothing,
    observe: nothing,
    gatewaysCounted: nothing,
    jwksFetched: nothing,
    rulesRefreshFailed: nothing,
    rulesConfirmed: nothing,
    ruleSetInForce: nothing,
  };
}
