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

/**
 * What the script returns: one string (see acquire.lua), or for a "batch" one per request (an error
 * in place of a request whose arguments were bad).
 */
export type AcquireReply = string | (string | Error)[];

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

/**
 * Reads the reply of an "again" (acquire.lua): the decisions of requests exactly like the one before
 * them in their batch, one per context, in order; throws a `StoreError`.
 */
export type AgainDecoder<T, C> = (reply: unknown, contexts: readonly C[]) => T[];

/** Sends one script call (`numberOfKeys`, then KEYS and ARGV); rejects with a `StoreError`. */
export type SendScript = (numberOfKeys: number, keysAndArgs: string[]) => Promise<unknown>;

/**
 * How a request's script call reaches Redis: at once, or in a batch (batching.ts). `keys` are the
 * request's keys (one slot on a Cluster), `args` its per-check arguments (the same array for every
 * request of the same limits: `acquireArgs`); `nowMs` and `minTtlMs` are the script's ARGV[2] and
 * ARGV[3] ('' for Redis TIME and no floor).
 */
export interface ScriptChannel {
  /**
   * Resolves with `decode(reply, context)`, rejects with a `StoreError` (a failed call, or what
   * `decode` threw). The reply is decoded where it arrives: no promise chained per request for it.
   * `decodeAgain`, for an acquire whose limits keep a string state: a batch may send this request as
   * one more of the request just before it when that is exactly like it (the same keys and the same
   * `args` array), and read its decision with `decodeAgain`.
   */
  call<T, C>(
    operation: ScriptOperation,
    keys: readonly string[],
    args: readonly string[],
    nowMs: string,
    minTtlMs: string,
    decode: ReplyDecoder<T, C>,
    context: C,
    decodeAgain?: AgainDecoder<T, C>,
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
  keys: readonly string[],
  args: readonly string[],
  nowMs: string,
  minTtlMs: string,
): string[] {
  return [...keys, operation, nowMs, minTtlMs, String(keys.length), ...args];
}

/** The argument lists built so far, by their first check's spec (a rule set's specs live as long as it). */
type Limits = readonly Pick<LimitCheck, 'spec' | 'cost'>[];
const acquireArgsBySpec = new WeakMap<LimitSpec, { limits: Limits; args: readonly string[] }[]>();
/** Most argument lists remembered per first spec (costs differ per request only with a cost rule). */
const MAX_ARGS_PER_SPEC = 8;

/**
 * An acquire's arguments: per check its algorithm, cost and numbers. Requests of the same limits at
 * the same costs get the same array (built once), so a batch sends it once and refers back to it;
 * a concurrency check's slot id is per request, so its arguments are too.
 */
export function acquireArgs(checks: readonly LimitCheck[]): readonly string[] {
  const n = checks.length;
  for (let i = 0; i < n; i++) if (checks[i]!.leaseId !== undefined) return buildAcquireArgs(checks);
  const first = checks[0]!.spec;
  let known = acquireArgsBySpec.get(first);
  if (known === undefined) {
    known = [];
    acquireArgsBySpec.set(first, known);
  }
  for (const entry of known) if (sameLimits(entry.limits, checks)) return entry.args;
  const args = buildAcquireArgs(checks);
  if (known.length >= MAX_ARGS_PER_SPEC) known.shift();
  known.push({ limits: checks.map(({ spec, cost }) => ({ spec, cost })), args });
  return args;
}

function sameLimits(a: Limits, b: Limits): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.spec !== b[i]!.spec || a[i]!.cost !== b[i]!.cost) return false;
  return true;
}

function buildAcquireArgs(checks: readonly LimitCheck[]): string[] {
  const args: string[] = [];
  for (const check of checks) {
    args.push(check.spec.algorithm, String(check.cost), ...scriptArgumentsOf(check.spec, check.leaseId));
  }
  return args;
}

/** A settlement's keys: `keyPrefix` + each key. */
export function settleKeys(settlements: readonly Settlement[], keyPrefix: string): string[] {
  const n = settlements.length;
  const keys: string[] = new Array(n);
  for (let i = 0; i < n; i++) keys[i] = keyPrefix + settlements[i]!.key;
  return keys;
}

/** A settlement's arguments: per settlement its algorithm, numbers and change. */
export function settleArgs(settlements: readonly Settlement[]): string[] {
  const args: string[] = [];
  for (const settlement of settlements) {
    args.push(
      settlement.spec.algorithm,
      ...scriptArgumentsOf(settlement.spec, settlement.leaseId),
      String(settlement.delta),
      String(settlement.admittedAtMs),
      settlement.refundMax === undefined ? '' : String(settlement.refundMax),
    );
  }
  return args;
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
