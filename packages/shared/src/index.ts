export * from './analytics/offenders.js';
export * from './config/env-vars.js';
export * from './config/host-port.js';
export * from './config/read-env.js';
export * from './decision/index.js';
export * from './format/duration.js';
export { clientWords, durationWords } from './format/fields.js';
export * from './http/client-key.js';
export * from './http/error-body.js';
export * from './http/normalize-host.js';
export * from './http/normalize-path.js';
export * from './http/path-segments.js';
export * from './http/request-head.js';
export * from './identity/claims.js';
export * from './identity/identity-env.js';
export { JwksUnavailableError } from './identity/jwks-keys.js';
export * from './identity/secret-keys.js';
export * from './identity/verifier.js';
export {
  type Algorithm,
  type AlgorithmModel,
  type Evaluation,
  LimitArgumentError,
  type LimitFormat,
  type LimitUsage,
  type Verdict,
} from './limiter/algorithms/algorithm.js';
export { carryDenialForward, carryForward } from './limiter/algorithms/carry-forward.js';
export { CONCURRENCY_RETRY_AFTER_MS, type SlotsState } from './limiter/algorithms/concurrency/model.js';
export {
  ConcurrencyLimitSchema,
  MAX_CONCURRENCY,
} from './limiter/algorithms/concurrency/rule-format.js';
export {
  ALGORITHM_NAMES,
  ALGORITHMS,
  type AlgorithmName,
  algorithmNamed,
  algorithmOf,
  DEFAULT_ALGORITHM,
  limitKeyName,
} from './limiter/algorithms/index.js';
export { leaseRequestsOf, leaseSpecOf } from './limiter/algorithms/lease.js';
export { estimateAt, type WindowState } from './limiter/algorithms/sliding-window/model.js';
export { SlidingWindowLimitSchema } from './limiter/algorithms/sliding-window/rule-format.js';
export {
  type BucketLimits,
  type BucketState,
  balanceAt,
  canEverAdmit,
  capacityRefillMs,
} from './limiter/algorithms/token-bucket/model.js';
export { TokenBucketLimitSchema } from './limiter/algorithms/token-bucket/rule-format.js';
export { MAX_WAIT_MS } from './limiter/algorithms/wait.js';
export * from './limiter/headers.js';
export * from './limiter/limits.js';
export * from './limiter/memory-store.js';
export * from './limiter/peek.js';
export {
  type SharedChannels,
  type Store,
  StoreError,
  type StoreErrorCode,
  type StoreReadiness,
} from './limiter/store.js';
export * from './rules/algorithm-changes.js';
export * from './rules/check.js';
export * from './rules/defaults.js';
export * from './rules/limits-of.js';
export * from './rules/match.js';
export * from './rules/schema.js';
export * from './rules/stored-rule.js';
export * from './rules/summary.js';
export * from './rules/validate.js';
