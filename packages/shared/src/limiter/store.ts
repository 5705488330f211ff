/**
 * The contract every bucket store implements (Redis and in-process). The gateway never knows
 * which one it has. A denial is a value (`allowed: false`); only a store failure throws.
 */

/** The limits of one rule, as the bucket arithmetic needs them. */
export interface BucketLimits {
  /** most tokens the bucket holds (the burst); > 0 */
  capacity: number;
  /** tokens gained every `periodMs`, continuously; > 0 */
  refill: number;
  /** refill period in milliseconds; > 0 */
  periodMs: number;
  /** how far below zero one admitted request may take the balance; >= 0 */
  maxDebt: number;
}

export interface DecisionRequest {
  /** bucket key, built with `bucketKey()` so one bucket stays on one Redis Cluster slot */
  key: string;
  limits: BucketLimits;
  /** tokens this request takes; > 0 */
  cost: number;
}

export interface Decision {
  allowed: boolean;
  /** balance after this decision (may be negative) */
  balance: number;
  /** ms until a request of the same cost could be admitted; 0 when admitted */
  retryAfterMs: number;
  /** ms until the bucket is full again (0 when full) */
  fullInMs: number;
}

export interface Store {
  readonly kind: 'redis' | 'memory';
  /**
   * Decides one request. Callers await one decision each; a store may settle many pending
   * decisions in one round trip (batching) without callers changing.
   */
  decide(request: DecisionRequest): Promise<Decision>;
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

/** The one error a store's `decide` rejects with (a denial is a value, not an error). */
export class StoreError extends Error {
  readonly code: StoreErrorCode;
  constructor(code: StoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreError';
    this.code = code;
  }
}

/** `{<ruleId>:<clientKey>}` with an optional prefix outside the braces (Redis Cluster hash tag). */
export function bucketKey(prefix: string, ruleId: string, clientKey: string): string {
  return `${prefix}{${ruleId}:${clientKey}}`;
}
