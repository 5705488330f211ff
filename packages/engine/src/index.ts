/**
 * @sluice/engine: the runtime every front door builds on (docs/engine.md). It imports no HTTP
 * framework and no `node:http`: a front door brings the transport, the engine the decisions.
 */
export type { EngineConfig } from './config.js';
export { createEngine, type Engine, type EngineDeps, STORE_CONNECT_WAIT_MS } from './engine.js';
export { ALIVE_WITHIN_MS, GatewayHeartbeat, HEARTBEAT_INTERVAL_MS } from './heartbeat.js';
export { createLimiter, type Limiter, type LimiterOptions } from './limiter.js';
export { DEFAULT_OFFENDERS_FLUSH_MS, OffenderFlusher } from './offenders/flusher.js';
export { DEFAULT_OFFENDER_CAPACITY, OffenderLog } from './offenders/offender-log.js';
export { createPrimaryStore } from './primary-store.js';
export { type RefreshOutcome, RulesCache, type RulesCacheOptions } from './rules/rules-cache.js';
export { type RuleSetSnapshot, type RulesSource, StaticRules } from './rules/rules-source.js';
export {
  type EngineLogFn,
  type EngineLogger,
  type EngineMetrics,
  noEngineMetrics,
  type RulesFailureReason,
} from './telemetry.js';
export { isClientKey, type LimitUsageAnswer, type UsageAnswer, usageOfClient } from './usage.js';
