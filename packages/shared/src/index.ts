export * from './analytics/offenders.js';
export * from './config/env-vars.js';
export * from './config/host-port.js';
export * from './config/read-env.js';
export * from './decision/index.js';
export * from './http/client-key.js';
export * from './http/error-body.js';
export * from './http/normalize-host.js';
export * from './http/normalize-path.js';
export * from './http/path-segments.js';
export {
  type Algorithm,
  type Evaluation,
  LimitArgumentError,
  type Verdict,
} from './limiter/algorithms/algorithm.js';
export { ALGORITHMS, algorithmOf } from './limiter/algorithms/index.js';
export { estimateAt, type WindowState } from './limiter/algorithms/sliding-window/model.js';
export {
  type BucketLimits,
  type BucketState,
  balanceAt,
  canEverAdmit,
  capacityRefillMs,
} from './limiter/algorithms/token-bucket/model.js';
export { MAX_WAIT_MS } from './limiter/algorithms/wait.js';
export * from './limiter/headers.js';
export * from './limiter/limits.js';
export * from './limiter/memory-store.js';
export * from './limiter/peek.js';
export { type Store, StoreError, type StoreErrorCode } from './limiter/store.js';
export * from './rules/duration.js';
export * from './rules/match.js';
export * from './rules/schema.js';
