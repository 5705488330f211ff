/**
 * acquire.lua as an ioredis command: its name and typing, its registration, what one request's call
 * sends (its keys, then its per-check arguments), and the failures of a call as `StoreError`s. The
 * wire format (KEYS, ARGV, ids, replies, the "batch" form) is written down in docs/redis-protocol.md.
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
 * One request's script call, as every channel takes it (issue 39: this was nine positional
 * parameters, written out three times). The wire format it becomes is docs/redis-protocol.md.
 */
export interface ScriptCall<T, C> {
  readonly operation: ScriptOperation;
  /** the request's keys, one per check (one slot on a Cluster) */
  readonly keys: readonly string[];
  /**
   * its per-check arguments: the same array for every request of the same limits (`acquireArgs`,
   * `settleArgs`), so that a batch sends it once and refers back to it
   */
  readonly args: readonly string[];
  /** its own ids, sent after `args`: its concurrency slots' lease ids (`slotIds`); undefined: none */
  readonly ids: readonly string[] | undefined;
  /** the script's clock, ARGV[2]: '' for Redis TIME */
  readonly nowMs: string;
  /** the script's floor on a key's TTL, ARGV[3]: '' for none */
  readonly minTtlMs: string;
  /** reads the reply where it arrives (no promise chained per request for it) */
  readonly decode: ReplyDecoder<T, C>;
  /** what the request asked (its checks, its settlements), handed to the decoders */
  readonly context: C;
  /**
   * Set for an acquire whose limits keep a string state, or a settlement that only gives slots back:
   * a batch may send this request as one more of the request just before it when that is exactly
   * like it (the same operation, keys and `args` array; a give-back sends its own ids), and read its
   * answer with this.
   */
  readonly decodeAgain?: AgainDecoder<T, C> | undefined;
}

/** How a request's script call reaches Redis: at once, or in a batch (batching.ts). */
export interface ScriptChannel {
  /**
   * Resolves with `call.decode(reply, call.context)`, rejects with a `StoreError` (a failed call, or
   * what `decode` threw).
   */
  call<T, C>(call: ScriptCall<T, C>): Promise<T>;
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

/**
 * Sends `call` as its own script call (not the "batch" form): its keys, then the operation, the clock,
 * the TTL floor, the number of checks, its arguments and its ids. The one place the single form is
 * written; resolves with the raw reply.
 */
export function sendSingle(send: SendScript, call: ScriptCall<unknown, unknown>): Promise<unknown> {
  const { keys, ids } = call;
  const keysAndArgs = [...keys, call.operation, call.nowMs, call.minTtlMs, String(keys.length), ...call.args];
  if (ids !== undefined) for (const id of ids) keysAndArgs.push(id);
  return send(keys.length, keysAndArgs);
}

/** Most argument lists remembered per first spec (costs differ per request only with a cost rule). */
const MAX_ARGS_PER_SPEC = 8;

/**
 * Argument lists built lately, by their first item's spec (a rule set's specs live as long as it), the
 * newest first, at most MAX_ARGS_PER_SPEC each: requests whose items are alike (`same`, item by item)
 * get the same array, so a batch sends it once and refers back to it.
 */
class RememberedArgs<Item extends { readonly spec: LimitSpec }> {
  readonly #bySpec = new WeakMap<LimitSpec, { items: readonly Item[]; args: readonly string[] }[]>();
  readonly #same: (a: Item, b: Item) => boolean;
  /** what of an item is remembered (the request's own item may hold more: a key, a lease id) */
  readonly #kept: (item: Item) => Item;
  readonly #build: (items: readonly Item[]) => string[];

  constructor(
    same: (a: Item, b: Item) => boolean,
    kept: (item: Item) => Item,
    build: (items: readonly Item[]) => string[],
  ) {
    this.#same = same;
    this.#kept = kept;
    this.#build = build;
  }

  of(items: readonly Item[]): readonly string[] {
    const first = items[0]!.spec;
    let known = this.#bySpec.get(first);
    if (known === undefined) {
      known = [];
      this.#bySpec.set(first, known);
    }
    for (const entry of known) if (this.#alike(entry.items, items)) return entry.args;
    const args = this.#build(items);
    if (known.length >= MAX_ARGS_PER_SPEC) known.pop();
    known.unshift({ items: items.map(this.#kept), args });
    return args;
  }

  #alike(a: readonly Item[], b: readonly Item[]): boolean {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!this.#same(a[i]!, b[i]!)) return false;
    return true;
  }
}

type Limit = Pick<LimitCheck, 'spec' | 'cost'>;
const acquireArgsRemembered = new RememberedArgs<Limit>(
  (a, b) => a.spec === b.spec && a.cost === b.cost,
  ({ spec, cost }) => ({ spec, cost }),
  buildAcquireArgs,
);

/**
 * An acquire's arguments: per check its algorithm, cost and numbers. Requests of the same limits at
 * the same costs get the same array (built once), so a batch sends it once and refers back to it; a
 * concurrency check's lease id is per request, and travels apart (`slotIds`).
 */
export function acquireArgs(checks: readonly LimitCheck[]): readonly string[] {
  return acquireArgsRemembered.of(checks);
}

function buildAcquireArgs(checks: readonly Limit[]): string[] {
  const args: string[] = [];
  for (const check of checks) {
    args.push(check.spec.algorithm, String(check.cost), ...scriptArgumentsOf(check.spec));
  }
  return args;
}

/**
 * A request's ids, sent after its arguments: its concurrency slots' lease ids, in check order (the
 * checks of an algorithm that holds slots: the Lua snippets that `takesId`); undefined when it holds
 * none (most requests). A lease id on another check means nothing and is not sent.
 */
export function slotIds(
  checks: readonly Pick<LimitCheck, 'spec' | 'leaseId'>[],
): readonly string[] | undefined {
  let ids: string[] | undefined;
  for (let i = 0; i < checks.length; i++) {
    const { spec, leaseId } = checks[i]!;
    if (leaseId === undefined || algorithmOf(spec).slots === undefined) continue;
    if (ids === undefined) ids = [leaseId];
    else ids.push(leaseId);
  }
  return ids;
}

/** A settlement's keys: `keyPrefix` + each key. */
export function settleKeys(settlements: readonly Settlement[], keyPrefix: string): string[] {
  const n = settlements.length;
  const keys: string[] = new Array(n);
  for (let i = 0; i < n; i++) keys[i] = keyPrefix + settlements[i]!.key;
  return keys;
}

type Change = Pick<Settlement, 'spec' | 'delta' | 'admittedAtMs' | 'refundMax'>;
const settleArgsRemembered = new RememberedArgs<Change>(
  (a, b) =>
    a.spec === b.spec &&
    a.delta === b.delta &&
    a.admittedAtMs === b.admittedAtMs &&
    a.refundMax === b.refundMax,
  ({ spec, delta, admittedAtMs, refundMax }) => ({ spec, delta, admittedAtMs, refundMax }),
  buildSettleArgs,
);

/**
 * A settlement's arguments: per settlement its algorithm, numbers and change (its lease id travels
 * apart: `slotIds`). The give-backs of requests admitted by one call carry the same change (0 at the
 * same admission clock): they get the same array, which a batch sends once (issue 16: a give-back
 * sent 7 arguments of its own, now its lease id).
 */
export function settleArgs(settlements: readonly Settlement[]): readonly string[] {
  // only give-backs are remembered: a charged settlement's change is mostly its own (a response's
  // size), and remembering each would cost more than it saves
  for (let i = 0; i < settlements.length; i++) {
    if (settlements[i]!.delta !== 0) return buildSettleArgs(settlements);
  }
  return settleArgsRemembered.of(settlements);
}

function buildSettleArgs(settlements: readonly Change[]): string[] {
  const args: string[] = [];
  for (const settlement of settlements) {
    args.push(
      settlement.spec.algorithm,
      ...scriptArgumentsOf(settlement.spec),
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
 * conversion is a measurable part of a decision's cost in the gateway).
 */
function scriptArgumentsOf(spec: LimitSpec): readonly string[] {
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
