/**
 * The Redis limiter store, on one Redis or on a Redis Cluster: one script call (acquire.lua) per
 * request and hash slot, whatever its number of limits, on Redis's own clock (`TIME`) unless it is
 * given one. Commands are never queued while Redis is away: a decision fails at once with a
 * `StoreError`, and the gateway's `STORE_FAILURE` policy decides.
 *
 * What it ties together, each in redis/: the client (client.ts), the script as a command and what a
 * call sends (script.ts), how calls reach Redis (batching.ts, unbatched.ts), the replies (reply.ts),
 * and a Cluster request whose limits span hash slots (cross-slot.ts). A request's keys share a slot
 * when they share a hash tag (`limitKey`'s `{<ruleId>:<clientKey>}`): such a request is one atomic call.
 *
 * Imported from the `@sluice/shared/redis` subpath only, so that the root entry never loads ioredis.
 */
import { Cluster } from 'ioredis';
import { ACQUIRE_FUNCTION } from './acquire-script.js';
import { LimitArgumentError } from './algorithms/algorithm.js';
import { assertChecks, assertSettlements, decisionOf } from './engine.js';
import type { LimitCheck, LimitOutcome, SettledLimit, Settlement, StoreDecision } from './limits.js';
import { peekRedis } from './peek-redis.js';
import { BatchingChannel } from './redis/batching.js';
import {
  type ClusterSeeds,
  connectedSocketOf,
  createRedisClient,
  fcall,
  isClusterSeeds,
  type RedisClient,
  type RedisClientOptions,
  whenReady,
} from './redis/client.js';
import { acquireAcrossSlots, type SlotGroupCalls, settleAcrossSlots } from './redis/cross-slot.js';
import { FunctionLibrary, isFunctionMissing, type ScriptMode } from './redis/function-library.js';
import {
  decisionOfReply,
  decisionsAgainOfReply,
  decisionsOfTakesReply,
  settledAgainOfReply,
  settledOfReply,
} from './redis/reply.js';
import {
  acquireArgs,
  defineAcquireCommand,
  type ScriptChannel,
  settleArgs,
  settleKeys,
  slotIds,
  toStoreError,
} from './redis/script.js';
import { UnbatchedChannel } from './redis/unbatched.js';
import { RedisSharedChannels } from './shared-channels-redis.js';
import { slotGroups, slotOf } from './slot-groups.js';
import { type SharedChannels, type Store, StoreError, type StoreReadiness } from './store.js';

export interface RedisStoreOptions extends RedisClientOptions {
  /** prepended to every check's key (outside its hash-tag braces), e.g. `"sluice:"`; default none */
  keyPrefix?: string;
  /**
   * Send the script calls of one event-loop turn bound for one node (one slot on a Cluster) as one
   * batched call; default true. `false`: one call per request (and slot group), as before batching.
   */
  batching?: boolean;
  /**
   * Without batching: hold the connection's writes until the end of the event-loop turn (`cork`,
   * uncorked by `setImmediate`), so the calls of one turn leave in one write. With batching: the
   * batches one turn ends with (several slots, or past the cap) leave in one write. Default false.
   */
  coalesceWrites?: boolean;
  /**
   * Redis Cluster: called when giving back an earlier slot group's charge failed (its node down or
   * slow). The charge then stands until the limit recovers: the client is limited more, never less.
   */
  onGiveBackFailure?: (error: StoreError) => void;
  /**
   * The store's clock in ms, read once when a call is made; default none: Redis `TIME`, the one clock
   * all gateways share. A simulation's clock (tests walk time freely with it); a gateway never sets it.
   */
  now?: () => number;
  /**
   * A floor on every written key's time to live, ms; default 0. With `now`, keys whose time to live
   * counts on the simulated clock would otherwise expire in real time under the simulation.
   */
  minTtlMs?: number;
  /**
   * Call the limiter as a Redis Function (loaded once per node) where Redis has them (>= 7); default
   * true. `false`: always EVALSHA, as on Redis 5 and 6 (redis/function-library.ts).
   */
  functions?: boolean;
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  /** The ioredis client (one Redis or a Cluster); attach `error` listeners here to log connection trouble. */
  readonly client: RedisClient;
  /** the client is a Redis Cluster: requests are split by hash slot */
  readonly isCluster: boolean;
  readonly shared: SharedChannels;
  readonly #keyPrefix: string;
  readonly #onGiveBackFailure: ((error: StoreError) => void) | undefined;
  readonly #now: (() => number) | undefined;
  /** the script's ARGV[3]: '' for no floor */
  readonly #minTtlMs: string;
  /** only a client the store created is quit by `close()` */
  readonly #ownsClient: boolean;
  readonly #channel: ScriptChannel;
  /** undefined: EVALSHA only (`functions: false`) */
  readonly #library: FunctionLibrary | undefined;
  #closed = false;
  #scriptCalls = 0;

  /**
   * @param redis an ioredis client to use (`Redis` or `Cluster`; the caller keeps owning it; configure
   *   it with `enableOfflineQueue: false` and a `commandTimeout` to get fast failures), a `redis://` /
   *   `rediss://` URL, or `{ clusterNodes }` for a client the store creates (`createRedisClient`) and owns.
   */
  constructor(redis: RedisClient | string | ClusterSeeds, options: RedisStoreOptions = {}) {
    this.#keyPrefix = options.keyPrefix ?? '';
    this.#onGiveBackFailure = options.onGiveBackFailure;
    this.#now = options.now;
    const minTtlMs = options.minTtlMs ?? 0;
    if (!(minTtlMs >= 0 && Number.isFinite(minTtlMs))) {
      throw new RangeError(`minTtlMs must be a finite number ≥ 0, got ${minTtlMs}`);
    }
    this.#minTtlMs = minTtlMs === 0 ? '' : String(minTtlMs);
    if (typeof redis === 'string' || isClusterSeeds(redis)) {
      this.client = createRedisClient(redis, options);
      this.#ownsClient = true;
    } else {
      this.client = redis;
      this.#ownsClient = false;
    }
    this.isCluster = this.client instanceof Cluster;
    this.shared = new RedisSharedChannels(this.client, this.#keyPrefix);
    defineAcquireCommand(this.client);
    this.#library = (options.functions ?? true) ? new FunctionLibrary(this.client) : undefined;
    const send = (numberOfKeys: number, keysAndArgs: string[]) => this.#send(numberOfKeys, keysAndArgs);
    // one socket per master on a Cluster: nothing to cork (ioredis' autoPipelining groups per node instead)
    const coalesce = (options.coalesceWrites ?? false) && !this.isCluster;
    const socketToCork = coalesce ? () => connectedSocketOf(this.client) : undefined;
    this.#channel =
      (options.batching ?? true)
        ? new BatchingChannel(send, this.isCluster ? (key) => String(slotOf(key)) : () => '', socketToCork)
        : new UnbatchedChannel(send, socketToCork);
  }

  acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    // no async wrapper: a decision is one promise, the channel's (issue 16: each async layer cost a
    // promise and a microtask per request); what the request asks wrong still rejects, never throws
    try {
      return this.#acquire(checks);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  settle(settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    try {
      return this.#settle(settlements);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Script calls sent to Redis so far (a batch counts once): Redis calls per request = this ÷ requests. */
  get scriptCalls(): number {
    return this.#scriptCalls;
  }

  /**
   * The failure domain of a request: the Redis node(s) its keys live on, as `host:port` (several
   * joined by ','), so that a circuit breaker can be kept per node; '' on one Redis (one domain). A
   * slot whose owner the client does not know yet is named `slot:<n>`.
   */
  domainOf(checks: readonly { key: string }[]): string {
    if (!this.isCluster || checks.length === 0) return '';
    const slots = (this.client as Cluster).slots;
    const nodes: string[] = [];
    for (const check of checks) {
      const slot = slotOf(this.#keyPrefix + check.key);
      const node = slots[slot]?.[0] ?? `slot:${slot}`;
      if (!nodes.includes(node)) nodes.push(node);
    }
    return nodes.length === 1 ? nodes[0]! : nodes.sort().join(',');
  }

  /**
   * How calls reach the limiter's Lua now: 'function' (FCALL of its library) or 'eval' (EVALSHA: before
   * the library is loaded, on Redis < 7, or with `functions: false`).
   */
  get scriptMode(): ScriptMode {
    return this.#library?.mode ?? 'eval';
  }

  /**
   * Resolves once the connection is ready and the library's first load is done or given up (calls
   * work either way); rejects with `STORE_UNAVAILABLE` after `timeoutMs`.
   */
  async ready(timeoutMs = 5_000): Promise<StoreReadiness> {
    await whenReady(this.client, timeoutMs);
    await this.#library?.settled();
    // the fallback decides alike but costs Redis about twice as much per call: say so once
    if (this.scriptMode === 'function')
      return { level: 'info', message: 'the limiter runs as a Redis Function library (FCALL)' };
    return {
      level: 'warn',
      message:
        "the limiter's Redis Function library could not be loaded (Redis older than 7, or a user without FUNCTION LOAD): decisions go by EVALSHA, which costs Redis more per call (docs/configuration.md)",
    };
  }

  peek(checks: readonly LimitCheck[]): Promise<LimitOutcome[]> {
    return peekRedis(this.client, this.#keyPrefix, checks, this.#now?.());
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#channel.flush(); // what was already asked still leaves
    this.#library?.close();
    if (!this.#ownsClient) return;
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect(); // not connected: stop reconnecting instead
    }
  }

  /** The script's ARGV[2] for a call made now: '' for Redis TIME, else the store's own clock. */
  #clock(): string {
    if (this.#now === undefined) return '';
    const nowMs = this.#now();
    if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
    return String(nowMs);
  }

  /**
   * One request's decision: one script call on one Redis, or on a Cluster when its keys share a hash
   * tag; otherwise one call per slot group (cross-slot.ts). Every call of the request runs on the
   * clock read when it was asked (synchronously, so calls made in a row keep their instants).
   */
  #acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    const nowMs = this.#clock();
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertChecks(checks);
    const n = checks.length;
    if (n === 0) return Promise.resolve(decisionOf([]));
    const keys: string[] = new Array(n);
    for (let i = 0; i < n; i++) keys[i] = this.#keyPrefix + checks[i]!.key;
    if (this.isCluster && n > 1) {
      const groups = slotGroups(keys);
      if (groups.length > 1) return acquireAcrossSlots(checks, keys, groups, this.#slotGroupCalls(nowMs));
    }
    return this.#acquireGroup(checks, keys, nowMs);
  }

  /** One script call's "settle" for all of a request's settlements; on a Cluster, one per slot group. */
  #settle(settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    const nowMs = this.#clock();
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertSettlements(settlements);
    const n = settlements.length;
    if (n === 0) return Promise.resolve([]);
    if (this.isCluster && n > 1) {
      const groups = slotGroups(settlements.map((settlement) => this.#keyPrefix + settlement.key));
      if (groups.length > 1) return settleAcrossSlots(settlements, groups, this.#slotGroupCalls(nowMs));
    }
    return this.#settleGroup(settlements, nowMs);
  }

  #slotGroupCalls(nowMs: string): SlotGroupCalls {
    return {
      acquire: (checks, keys) => this.#acquireGroup(checks, keys, nowMs),
      settle: (settlements) => this.#settleGroup(settlements, nowMs),
      onGiveBackFailure: this.#onGiveBackFailure,
    };
  }

  /** One acquire.lua call: all or nothing over `checks`, whose `keys` share one slot on a Cluster. */
  #acquireGroup(
    checks: readonly LimitCheck[],
    keys: readonly string[],
    nowMs: string,
  ): Promise<StoreDecision> {
    const ids = slotIds(checks);
    return this.#channel.call({
      operation: 'acquire',
      keys,
      args: acquireArgs(checks),
      ids,
      nowMs,
      minTtlMs: this.#minTtlMs,
      decode: decisionOfReply,
      context: checks,
      // one more like the request before it in a batch: limits of a string state, read back from it,
      // or slots only (a lease id per check), each request sending its lease ids
      decodeAgain:
        ids === undefined
          ? decisionsAgainOfReply
          : ids.length === checks.length
            ? decisionsOfTakesReply
            : undefined,
    });
  }

  /** One "settle" (or, for renewals, "renew") call: `settlements` share one slot on a Cluster. */
  #settleGroup(settlements: readonly Settlement[], nowMs: string): Promise<SettledLimit[]> {
    const operation = settlements[0]!.renew === true ? 'renew' : 'settle';
    const ids = slotIds(settlements);
    return this.#channel.call({
      operation,
      keys: settleKeys(settlements, this.#keyPrefix),
      args: settleArgs(settlements),
      ids,
      nowMs,
      minTtlMs: this.#minTtlMs,
      decode: settledOfReply,
      context: settlements,
      // slots given back (a lease id per settlement) and no cost changed: a batch may send it as one
      // more like the give-back before
      decodeAgain:
        operation === 'settle' && ids?.length === settlements.length && changesNoCost(settlements)
          ? settledAgainOfReply
          : undefined,
    });
  }

  /** Sends one script call (FCALL, or EVALSHA: redis/function-library.ts); rejects with a `StoreError`. */
  #send(numberOfKeys: number, keysAndArgs: string[]): Promise<unknown> {
    this.#scriptCalls++;
    if (this.#library?.mode !== 'function') return this.#evalsha(numberOfKeys, keysAndArgs);
    return fcall(this.client, ACQUIRE_FUNCTION, numberOfKeys, keysAndArgs).then(undefined, (error) => {
      if (!isFunctionMissing(error)) throw toStoreError(error);
      // the node lost the library (nothing ran): this call by EVALSHA, and the library loaded again
      this.#library?.lost();
      return this.#evalsha(numberOfKeys, keysAndArgs);
    });
  }

  #evalsha(numberOfKeys: number, keysAndArgs: string[]): Promise<unknown> {
    return this.client.sluiceAcquire(numberOfKeys, ...keysAndArgs).then(undefined, rejectAsStoreError);
  }
}

/** No settlement charges, gives back or refunds a cost (a slot's give-back): acquire.lua's settleAgain may apply them. */
function changesNoCost(settlements: readonly Settlement[]): boolean {
  for (let i = 0; i < settlements.length; i++) {
    const { delta, refundMax } = settlements[i]!;
    if (delta !== 0 || refundMax !== undefined) return false;
  }
  return true;
}

function rejectAsStoreError(error: unknown): never {
  throw toStoreError(error);
}
