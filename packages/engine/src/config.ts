/**
 * What the engine is built from: the store, the rules source, the failure policy, identity. Each
 * front door reads these from its environment (the gateway: config/config.ts, with the variables
 * docs/configuration.md lists) and hands them over as they are.
 */
import type { JwtConfig, StoreFailurePolicy } from '@sluice/shared';

export interface EngineConfig {
  /** base URL of the rules API, without a trailing slash */
  rulesApiUrl: string;
  rulesApiToken: string | undefined;
  /** node-cron expression of the rules refresh */
  rulesRefresh: string;
  rulesFetchTimeoutMs: number;
  /** undefined with `redisClusterNodes` undefined too: the in-process store (one gateway only) */
  redisUrl: string | undefined;
  /** seed nodes (`host:port`) of a Redis Cluster; never set together with `redisUrl` */
  redisClusterNodes: string[] | undefined;
  /** prepended to every key the engine writes */
  redisKeyPrefix: string;
  storeFailure: StoreFailurePolicy;
  /** a store call without an answer in this long fails (the policy decides), ms */
  storeTimeoutMs: number;
  /** most (rule, client) denials remembered locally */
  denialCacheSize: number;
  /** lease mode: how long a lease lasts at most, and how much traffic it is sized for, ms */
  leaseMs: number;
  /** most buckets in the in-process store (no Redis, or the `local` fallback) */
  localStoreMaxKeys: number;
  /** how long a concurrency slot lives without a renewal: the longest exchange plus a margin, ms */
  slotLeaseMs: number;
  /** how bearer tokens are verified; undefined: every request is unauthenticated */
  jwt: JwtConfig | undefined;
  /** the HMAC key of credential client keys; undefined: plain SHA-256 (warned at start) */
  clientKeySecret: string | undefined;
}
