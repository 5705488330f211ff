/**
 * The contract every limiter store implements (Redis and in-process). The gateway never knows
 * which one it has: what differs (reading without charging, waiting for a connection, the channels
 * gateways share beside the limits) is asked of the store through this interface, never by its class.
 * A denial is a value (`allowed: false`); only a store failure throws.
 */
import type { RuleOffenderCounts } from '../analytics/offenders.js';
import type { LimitCheck, LimitOutcome, SettledLimit, Settlement, StoreDecision } from './limits.js';

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
  /**
   * Optional: each check's outcome now, charging nothing (`GET /usage`): what the next request would
   * be told. Rejects when the store cannot be read. A store without it cannot answer usage.
   */
  peek?(checks: readonly LimitCheck[]): Promise<LimitOutcome[]>;
  /**
   * Optional: resolves once the store can decide (connected, scripts loaded), within `timeoutMs`, with
   * what an operator should know of how it runs; rejects with `STORE_UNAVAILABLE` after that. A store
   * without it is ready at once.
   */
  ready?(timeoutMs?: number): Promise<StoreReadiness>;
  /**
   * Optional: what the gateways sharing this store share besides the limits (their count, their top
   * offenders). A store without it is this process's alone: one gateway, offenders kept in memory.
   */
  readonly shared?: SharedChannels;
  close(): Promise<void>;
}

/** How a store that became ready runs, in words for the log. */
export interface StoreReadiness {
  level: 'info' | 'warn';
  message: string;
}

/** The channels gateways sharing one store use beside the limits (docs/engine.md). */
export interface SharedChannels {
  /**
   * One heartbeat: `member` is alive at `nowMs` (wall clock), members not seen within `aliveWithinMs`
   * are dropped; resolves with the count of members alive, `member` included.
   */
  beat(member: string, nowMs: number, aliveWithinMs: number): Promise<number>;
  /** `member` leaves at once (a gateway that stops), so the others' count drops without waiting. */
  leave(member: string): Promise<void>;
  /** Adds denial counts (rule id → minute → member → denials) to the shared top offenders. */
  addOffenderCounts(counts: ReadonlyMap<string, RuleOffenderCounts>): Promise<void>;
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
