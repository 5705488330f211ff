/**
 * The contract every limiter store implements (Redis and in-process). The gateway never knows
 * which one it has. A denial is a value (`allowed: false`); only a store failure throws.
 */
import type { LimitCheck, SettledLimit, Settlement, StoreDecision } from './limits.js';

export interface Store {
  readonly kind: 'redis' | 'memory';
  /**
   * Decides all the checks of one request at once, all or nothing: admitted only if every check
   * admits, and then every one is charged; otherwise nothing is charged. One outcome per check, in
   * order. Rejects with `StoreError` when the store cannot decide, and with `LimitArgumentError`
   * for checks out of range (a bug, not a client's doing).
   */
  acquire(checks: readonly LimitCheck[]): Promise<StoreDecision>;
  /**
   * The end of one request's exchange, in one call: its slots given back, its cost difference
   * settled (see `Settlement`). One result per settlement, in order. Rejects as `acquire` does.
   */
  settle(settlements: readonly Settlement[]): Promise<SettledLimit[]>;
  /**
   * Optional: the failure domain `checks` are decided in (on a Redis Cluster, the node(s) owning their
   * keys), so that a failing node does not send every other node's requests to the failure policy.
   * A store without it is one domain.
   */
  domainOf?(checks: readonly LimitCheck[]): string;
  close(): Promise<void>;
}

/** Why a store could not decide; the gateway's `STORE_FAILURE` policy decides what that means. */
export type StoreErrorCode =
  /** no connection (down, reconnecting, or the store was closed); rejected at once, never queued */
  | 'STORE_UNAVAILABLE'
  /** no answer within the store's command timeout */
  | 'STORE_TIMEOUT'
  /** the store answered with an error or an unreadable reply */
  | 'STORE_ERROR';

/** The one error a store's `acquire` rejects with when it cannot decide (a denial is a value). */
export class StoreError extends Error {
  readonly code: StoreErrorCode;
  constructor(code: StoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreError';
    this.code = code;
  }
}

/**
 * The numbers of a token bucket. Re-exported here because rules/match.ts (v1 compile) imports it from
 * this module; the rules v2 compile builds `TokenBucketSpec`s instead.
 */
export type { BucketLimits } from './algorithms/token-bucket/model.js';
