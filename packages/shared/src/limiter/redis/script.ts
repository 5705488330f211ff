/**
 * acquire.lua as an ioredis command: its name and typing, its registration, what one request's call
 * sends (its keys, then its per-check arguments), and the failures of a call as `StoreError`s.
 *
 * The script is registered once per client with `defineCommand` (only if absent); ioredis then sends
 * EVALSHA and falls back to EVAL by itself when Redis answers NOSCRIPT (after a restart or `SCRIPT
 * FLUSH`), on one Redis or on whichever Cluster master owns the keys.
 */
import type { Result } from 'ioredis';
import { ACQUIRE_LUA } from '../acquire-script.js';
import { algorithmOf } from '../algorithms/index.js';
import type { LimitCheck, LimitSpec, Settlement } from '../limits.js';
import { StoreError } from '../store.js';
import type { RedisClient } from './client.js';

/** The ioredis command name the script is registered under. */
export const ACQUIRE_COMMAND = 'sluiceAcquire';

/** What the script returns: per check, allowed 1|0, level as a '%.17g' string, then two whole ms. */
export type AcquireReply = (number | string)[];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** `numberOfKeys`, KEYS, then ARGV, as documented at the top of acquire.lua. */
    sluiceAcquire(numberOfKeys: number, ...keysAndArgs: string[]): Result<AcquireReply, Context>;
  }
}

/** The script's operations a request makes (the "batch" form wraps them, batching.ts). */
export type ScriptOperation = 'acquire' | 'settle' | 'renew';

/** Reads one request's reply (`context`: what the request asked, e.g. its checks); throws a `StoreError`. */
export type ReplyDecoder<T, C> = (reply: unknown, context: C) => T;

/** Sends one script call (`numberOfKeys`, then KEYS and ARGV); rejects with a `StoreError`. */
export type SendScript = (numberOfKeys: number, keysAndArgs: string[]) => Promise<unknown>;

/**
 * How a request's script call reaches Redis: at once, or in a batch (batching.ts). `keysAndArgs`
 * holds the request's `n` keys (one slot on a Cluster), then its per-check arguments; `nowMs` and
 * `minTtlMs` are the script's ARGV[2] and ARGV[3] ('' for Redis TIME and no floor).
 */
export interface ScriptChannel {
  /**
   * Resolves with `decode(reply, context)`, rejects with a `StoreError` (a failed call, or what
   * `decode` threw). The reply is decoded where it arrives: no promise chained per request for it.
   */
  call<T, C>(
    operation: ScriptOperation,
    n: number,
    keysAndArgs: readonly string[],
    nowMs: string,
    minTtlMs: string,
    decode: ReplyDecoder<T, C>,
    context: C,
  ): Promise<T>;
  /** sends whatever waits (the store closes) */
  flush(): void;
}

/** Registers the script on `client` unless a store already did (several stores may share a client). */
export function defineAcquireCommand(client: RedisClient): void {
  // no numberOfKeys: each call passes it first, as many keys as the request has checks
  if (typeof client[ACQUIRE_COMMAND] !== 'function') {
    client.defineCommand(ACQUIRE_COMMAND, { lua: ACQUIRE_LUA });
  }
}

/** One request's own call: its keys, the operation, the clock, the number of checks, its arguments. */
export function singleCallArguments(
  operation: ScriptOperation,
  n: number,
  keysAndArgs: readonly string[],
  nowMs: string,
  minTtlMs: string,
): string[] {
  return [...keysAndArgs.slice(0, n), operation, nowMs, minTtlMs, String(n), ...keysAndArgs.slice(n)];
}

/** An acquire's keys (`keys`, already prefixed) and, per check, its algorithm, cost and numbers. */
export function acquireKeysAndArgs(checks: readonly LimitCheck[], keys: readonly string[]): string[] {
  const keysAndArgs: string[] = keys.slice();
  for (const check of checks) {
    keysAndArgs.push(
      check.spec.algorithm,
      String(check.cost),
      ...scriptArgumentsOf(check.spec, check.leaseId),
    );
  }
  return keysAndArgs;
}

/** A settlement's keys (`keyPrefix` + each key) and, per settlement, its algorithm, numbers and change. */
export function settleKeysAndArgs(settlements: readonly Settlement[], keyPrefix: string): string[] {
  const n = settlements.length;
  const keysAndArgs: string[] = new Array(n);
  for (let i = 0; i < n; i++) keysAndArgs[i] = keyPrefix + settlements[i]!.key;
  for (const settlement of settlements) {
    keysAndArgs.push(
      settlement.spec.algorithm,
      ...scriptArgumentsOf(settlement.spec, settlement.leaseId),
      String(settlement.delta),
      String(settlement.admittedAtMs),
      settlement.refundMax === undefined ? '' : String(settlement.refundMax),
    );
  }
  return keysAndArgs;
}

/** Each limit's numbers as the script reads them, per spec object (a rule set's specs live as long as it). */
const specArguments = new WeakMap<LimitSpec, readonly string[]>();

/**
 * A spec's script arguments, stringified once per spec rather than once per request (number-to-string
 * conversion is a measurable part of a decision's cost in the gateway). A lease id is per request.
 */
function scriptArgumentsOf(spec: LimitSpec, leaseId: string | undefined): readonly string[] {
  if (leaseId !== undefined) return algorithmOf(spec).luaArguments(spec, leaseId);
  let args = specArguments.get(spec);
  if (args === undefined) {
    args = algorithmOf(spec).luaArguments(spec);
    specArguments.set(spec, args);
  }
  return args;
}

/**
 * A call's failure as the `STORE_FAILURE` policy reads it: Redis answered with an error
 * (`STORE_ERROR`), did not answer in time (`STORE_TIMEOUT`), or could not be reached (`STORE_UNAVAILABLE`).
 */
export function toStoreError(error: unknown): StoreError {
  if (error instanceof StoreError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof Error && error.name === 'ReplyError') {
    return new StoreError('STORE_ERROR', `Redis: ${message}`, { cause: error });
  }
  if (/timed out/i.test(message))
    return new StoreError('STORE_TIMEOUT', `Redis: ${message}`, { cause: error });
  return new StoreError('STORE_UNAVAILABLE', `Redis: ${message}`, { cause: error });
}
