/**
 * The token-bucket plug-in: its model (model.ts) and Lua twin (token-bucket.lua), and what the rest of
 * Sluice asks of a token bucket. Its balance is the level: `r` is the whole tokens left, a bucket
 * nobody asked is full, and a lease may take from it (never overdrawing: only an exact decision may).
 */
import type { LimitOutcome } from '../../limits.js';
import { type Algorithm, fullInSeconds, outcomeLater } from '../algorithm.js';
import { waitMs } from '../wait.js';
import { windowSeconds } from '../whole-seconds.js';
import {
  type BucketState,
  balanceAt,
  bucketTag,
  capacityRefillMs,
  refillRatePerMs,
  type TokenBucketSpec,
  tokenBucketModel,
} from './model.js';
import { type TOKEN_BUCKET_FIELDS, type TokenBucketLimitSchema, tokenBucketFormat } from './rule-format.js';

/** Whole tokens left, never negative. */
function tokensLeft(balance: number): number {
  return balance > 0 ? Math.floor(balance) : 0;
}

/**
 * `"<balance> <updatedAtMs> <tag>"`, as the Lua twin writes it ('%.17g' each, then the tag; without a
 * tag: written before tags); anything else (another algorithm's state) is nothing.
 */
export function parseBucketState(reply: unknown): BucketState | undefined {
  if (typeof reply !== 'string') return undefined;
  const parts = reply.split(' ');
  if (parts.length !== 2 && !(parts.length === 3 && parts[2]!.startsWith('T'))) return undefined;
  if (parts[0] === '' || parts[1] === '') return undefined;
  const balance = Number(parts[0]);
  const updatedAtMs = Number(parts[1]);
  if (!Number.isFinite(balance) || !Number.isFinite(updatedAtMs)) return undefined;
  return parts.length === 3 ? { balance, updatedAtMs, tag: parts[2]! } : { balance, updatedAtMs };
}

export const tokenBucket: Algorithm<
  TokenBucketSpec,
  BucketState,
  typeof TOKEN_BUCKET_FIELDS,
  typeof TokenBucketLimitSchema
> = {
  ...tokenBucketModel,
  luaFile: 'token-bucket/token-bucket.lua',

  keyName: (limitName) => limitName,
  redisState: { command: (key) => ['GET', key], parse: parseBucketState },

  remaining: (_spec, level) => tokensLeft(level),
  // until the balance holds one whole token more than `r`, by the same refill arithmetic and wait
  // search that decide: on a denial of cost 1 that is its Retry-After (b back to 1)
  moreQuotaMs(spec, outcome) {
    const wanted = outcome.remaining + 1;
    if (wanted > spec.capacity) return 0;
    const state = { balance: outcome.level, updatedAtMs: 0 };
    return waitMs(
      (x) => balanceAt(state, spec, x) >= wanted,
      (wanted - outcome.level) / refillRatePerMs(spec),
    );
  },
  // `w`: an empty bucket's time to be full, by the same arithmetic as the waits
  policyParameters: (spec) => `q=${Math.floor(spec.capacity)};w=${windowSeconds(capacityRefillMs(spec))}`,
  idleLevel: (spec) => spec.capacity,
  carryForward(outcome: LimitOutcome, spec, elapsedMs) {
    const balance = balanceAt({ balance: outcome.level, updatedAtMs: 0 }, spec, elapsedMs);
    return outcomeLater(outcome, balance, tokensLeft(balance), elapsedMs);
  },
  usage: (_spec, outcome) => ({
    remaining: outcome.remaining,
    debt: outcome.level < 0 ? -outcome.level : 0,
    inFlight: 0,
    fullInSeconds: fullInSeconds(outcome),
  }),

  // a quarter of the capacity at most, so other gateways still find tokens in the bucket
  leaseRequests: (spec, cost) => Math.floor(spec.capacity / 4 / cost),
  leaseSpec: (spec) => ({ ...spec, maxDebt: 0 }),
  // the model's own wait: the same search that decides, on the balance the denial saw
  // at least one whole token: a share below it would never admit a request of cost 1
  fairShare: (spec, gateways) => ({
    ...spec,
    capacity: Math.max(spec.capacity / gateways, Math.min(spec.capacity, 1)),
    refill: spec.refill / gateways,
    maxDebt: spec.maxDebt / gateways,
  }),
  leaseWaitMs: (spec, outcome, tokens) =>
    tokenBucketModel
      .evaluate(
        { balance: outcome.level, updatedAtMs: 0, tag: bucketTag(spec) },
        { ...spec, maxDebt: 0 },
        tokens,
        0,
      )
      .hold().retryAfterMs,
  chargeCeiling: (spec) => spec.capacity + spec.maxDebt,
  defaultRefundMax: (spec) => spec.capacity,

  rule: tokenBucketFormat,
};
