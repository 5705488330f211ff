/**
 * The Redis limiter store, on one Redis or on a Redis Cluster: one script call (acquire.lua) per
 * request and hash slot, whatever its number of limits, on Redis's own clock (`TIME`).
 *
 * The script is registered once per client with `defineCommand` (only if absent); ioredis then
 * sends EVALSHA and falls back to EVAL by itself when Redis answers NOSCRIPT (after a restart or
 * `SCRIPT FLUSH`). Commands are never queued while Redis is away (`enableOfflineQueue: false`):
 * a decision fails at once with a `StoreError`, and the gateway's `STORE_FAILURE` policy decides.
 *
 * On a Redis Cluster (`{ clusterNodes }`) the script is registered the same way and ioredis sends each
 * call to the master owning its keys, loading the script there on NOSCRIPT, following MOVED/ASK and a
 * failed-over master. A request's keys share a hash slot when they share a hash tag (`limitKey`'s
 * `{<ruleId>:<clientKey>}`): such a request is still one atomic call. A request whose limits span
 * slots (a per-client limit beside a `global` one) is decided one slot group at a time in the rule's
 * order; when a later group denies or fails, what the earlier groups charged is given back at once
 * (the script's "settle" with the charge as a negative delta), so nothing is over-admitted. Limits
 * after the denying group are not asked. A settlement is split the same way, one call per slot group.
 *
 * Batching (on by default, option `batching`): the script calls bound for one Redis node within one
 * event-loop turn leave as ONE call of the script's "batch" form, which decides them one by one, each
 * all or nothing, in arrival order, exactly as separate calls would (on the batch's one clock): batching
 * changes the cost, never a result. On a Cluster a batch holds the requests of one hash slot only (one
 * script call may touch one slot). A batch is sent when the turn ends (`setImmediate`), or at once when
 * it reaches MAX_BATCH_REQUESTS requests or MAX_BATCH_KEYS keys. A failed batch call fails each of its
 * requests with the same `StoreError`.
 *
 * Imported from the `@sluice/shared/redis` subpath only, so that the root entry never loads ioredis.
 */
import { Cluster, type ClusterOptions, Redis, type RedisOptions, type Result } from 'ioredis';
import { ACQUIRE_LUA } from './acquire-script.js';
import { LimitArgumentError } from './algorithms/algorithm.js';
import { algorithmOf } from './algorithms/index.js';
import { assertChecks, assertSettlements, decisionOf, outcomeOf, settledOf } from './engine.js';
import type {
  LimitCheck,
  LimitOutcome,
  LimitSpec,
  SettledLimit,
  Settlement,
  StoreDecision,
} from './limits.js';
import { slotGroups, slotOf } from './slot-groups.js';
import { type Store, StoreError } from './store.js';

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

/**
 * Most requests in one batched script call. Redis runs a script alone: nothing else is served while it
 * runs, so a batch must stay short. A one-limit request costs Redis about 10 µs inside the script
 * (bench/gateway.ts, CPU column), so 64 of them hold Redis well under a millisecond, while a gateway
 * at full speed rarely has more than a few dozen decisions waiting in one turn anyway.
 */
export const MAX_BATCH_REQUESTS = 64;
/**
 * Most keys in one batched script call: stacked rules cost per key (each read and written), so the
 * cap counts keys too; 128 keys is the same bound in time as 64 one-limit requests, twice over.
 */
export const MAX_BATCH_KEYS = 128;

/** A Redis Cluster to connect to: its seed nodes as `host:port` (`REDIS_CLUSTER_NODES`). */
export interface ClusterSeeds {
  readonly clusterNodes: readonly string[];
}

/** The ioredis client a `RedisStore` works on: one Redis, or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

export interface RedisStoreOptions {
  /** prepended to every check's key (outside its hash-tag braces), e.g. `"sluice:"`; default none */
  keyPrefix?: string;
  /** per-command timeout in ms, for a client the store creates; default 50 (`STORE_TIMEOUT_MS`) */
  commandTimeoutMs?: number;
  /** connect timeout in ms, for a client the store creates; default 2000 */
  connectTimeoutMs?: number;
  /** let ioredis send the decisions of one event-loop tick as one pipeline; default false */
  autoPipelining?: boolean;
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
}

/** Reconnect backoff: 100 ms, 200 ms, … up to 2 s between attempts, forever. */
function reconnectDelayMs(attempt: number): number {
  return Math.min(100 * attempt, 2_000);
}

/** Parses `host:port` (IPv6 in brackets: `[::1]:7000`). */
export function parseHostPort(text: string): { host: string; port: number } | undefined {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(text.trim());
  if (!match) return undefined;
  const port = Number(match[3]);
  if (port < 1 || port > 65_535) return undefined;
  return { host: match[1] ?? match[2]!, port };
}

function isClusterSeeds(value: unknown): value is ClusterSeeds {
  return typeof value === 'object' && value !== null && 'clusterNodes' in value;
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  /** The ioredis client (one Redis or a Cluster); attach `error` listeners here to log connection trouble. */
  readonly client: RedisClient;
  /** the client is a Redis Cluster: requests are split by hash slot */
  readonly isCluster: boolean;
  readonly #keyPrefix: string;
  readonly #onGiveBackFailure: ((error: StoreError) => void) | undefined;
  /** only a client the store created is quit by `close()` */
  readonly #ownsClient: boolean;
  readonly #coalesceWrites: boolean;
  readonly #batching: boolean;
  /** the connection is corked until the end of this event-loop turn */
  #corked = false;
  #closed = false;
  /** batching: the open batch of each route ('' on one Redis, the slot on a Cluster), in arrival order */
  readonly #openBatches = new Map<string, Batch>();
  #flushScheduled = false;
  #scriptCalls = 0;

  /**
   * @param redis an ioredis client to use (`Redis` or `Cluster`; the caller keeps owning it; configure
   *   it with `enableOfflineQueue: false` and a `commandTimeout` to get fast failures), a `redis://` /
   *   `rediss://` URL, or `{ clusterNodes }` for a client the store creates and owns.
   */
  constructor(redis: RedisClient | string | ClusterSeeds, options: RedisStoreOptions = {}) {
    this.#keyPrefix = options.keyPrefix ?? '';
    this.#onGiveBackFailure = options.onGiveBackFailure;
    if (isClusterSeeds(redis)) {
      this.client = createClusterClient(redis, options);
      this.client.on('error', () => {});
      this.#ownsClient = true;
    } else if (typeof redis === 'string') {
      const clientOptions: RedisOptions = {
        enableOfflineQueue: false,
        commandTimeout: options.commandTimeoutMs ?? 50,
        connectTimeout: options.connectTimeoutMs ?? 2_000,
        maxRetriesPerRequest: 1,
        retryStrategy: reconnectDelayMs,
        enableAutoPipelining: options.autoPipelining ?? false,
      };
      this.client = new Redis(redis, clientOptions);
      // Without a listener ioredis prints every reconnect failure; failures surface through acquire().
      this.client.on('error', () => {});
      this.#ownsClient = true;
    } else {
      this.client = redis;
      this.#ownsClient = false;
    }
    this.isCluster = this.client instanceof Cluster;
    // one socket per master: nothing to cork (ioredis' autoPipelining groups per node instead)
    this.#coalesceWrites = (options.coalesceWrites ?? false) && !this.isCluster;
    this.#batching = options.batching ?? true;
    // no numberOfKeys: the call passes it first, as many keys as the request has checks
    if (typeof this.client[ACQUIRE_COMMAND] !== 'function') {
      this.client.defineCommand(ACQUIRE_COMMAND, { lua: ACQUIRE_LUA });
    }
  }

  acquire(checks: readonly LimitCheck[]): Promise<StoreDecision> {
    return this.#acquire(checks, '', '');
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
   * TESTS ONLY: decides on a simulated clock (`nowMs`) instead of Redis `TIME`, and keeps written keys
   * at least `minTtlMs` so real-time expiry cannot disturb the simulation. Production never calls it.
   */
  acquireAt(checks: readonly LimitCheck[], nowMs: number, minTtlMs = 0): Promise<StoreDecision> {
    if (!Number.isFinite(nowMs)) {
      return Promise.reject(new LimitArgumentError(`nowMs must be finite, got ${nowMs}`));
    }
    return this.#acquire(checks, String(nowMs), String(minTtlMs));
  }

  settle(settlements: readonly Settlement[]): Promise<SettledLimit[]> {
    return this.#settle(settlements, '', '');
  }

  /** TESTS ONLY: `settle` on a simulated clock, like `acquireAt`. */
  settleAt(settlements: readonly Settlement[], nowMs: number, minTtlMs = 0): Promise<SettledLimit[]> {
    if (!Number.isFinite(nowMs)) {
      return Promise.reject(new LimitArgumentError(`nowMs must be finite, got ${nowMs}`));
    }
    return this.#settle(settlements, String(nowMs), String(minTtlMs));
  }

  /** Resolves once the connection is ready; rejects with `STORE_UNAVAILABLE` after `timeoutMs`. */
  ready(timeoutMs = 5_000): Promise<void> {
    if (this.client.status === 'ready') return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (error?: StoreError) => {
        clearTimeout(timer);
        this.client.off('ready', onReady);
        this.client.off('end', onEnd);
        if (error) reject(error);
        else resolve();
      };
      const onReady = () => done();
      const onEnd = () => done(new StoreError('STORE_UNAVAILABLE', 'Redis connection ended'));
      const timer = setTimeout(
        () => done(new StoreError('STORE_UNAVAILABLE', `Redis not ready within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.client.on('ready', onReady);
      this.client.on('end', onEnd);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#flush(); // what was already asked still leaves
    if (!this.#ownsClient) return;
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect(); // not connected: stop reconnecting instead
    }
  }

  /**
   * One request's decision: one script call on one Redis, or on a Cluster when its keys share a hash
   * tag; otherwise one call per slot group (`#acquireAcrossSlots`). Each call goes through `#script`
   * (batched or not).
   */
  async #acquire(checks: readonly LimitCheck[], nowMs: string, minTtlMs: string): Promise<StoreDecision> {
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertChecks(checks);
    const n = checks.length;
    if (n === 0) return decisionOf([]);
    const keys: string[] = new Array(n);
    for (let i = 0; i < n; i++) keys[i] = this.#keyPrefix + checks[i]!.key;
    if (this.isCluster && n > 1) {
      const groups = slotGroups(keys);
      if (groups.length > 1) return this.#acquireAcrossSlots(checks, keys, groups, nowMs, minTtlMs);
    }
    return this.#call(checks, keys, nowMs, minTtlMs);
  }

  /** One acquire.lua call: all or nothing over `checks`, whose `keys` share one slot on a Cluster. */
  async #call(
    checks: readonly LimitCheck[],
    keys: readonly string[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<StoreDecision> {
    const n = checks.length;
    const keysAndArgs: string[] = keys.slice();
    for (const check of checks) {
      keysAndArgs.push(
        check.spec.algorithm,
        String(check.cost),
        ...scriptArgumentsOf(check.spec, check.leaseId),
      );
    }
    return parseReply(await this.#script('acquire', n, keysAndArgs, nowMs, minTtlMs), checks);
  }

  /**
   * Redis Cluster, a request whose limits live in several slots: each slot group decided in turn, in
   * the rule's order, each all or nothing. A group that denies ends the decision: the groups before
   * it are given back what they were charged, at once (their outcomes are then the levels after the
   * give-back), the groups after it are not asked (`notAsked`). A group that fails gives back the
   * same way and the failure is thrown, for the `STORE_FAILURE` policy. The decision's `atMs` is the
   * first group's clock.
   */
  async #acquireAcrossSlots(
    checks: readonly LimitCheck[],
    keys: readonly string[],
    groups: readonly number[][],
    nowMs: string,
    minTtlMs: string,
  ): Promise<StoreDecision> {
    const outcomes: LimitOutcome[] = new Array(checks.length);
    const charged: ChargedGroup[] = [];
    let atMs: number | undefined;
    for (let g = 0; g < groups.length; g++) {
      const indexes = groups[g]!;
      let decision: StoreDecision;
      try {
        decision = await this.#call(
          indexes.map((i) => checks[i]!),
          indexes.map((i) => keys[i]!),
          nowMs,
          minTtlMs,
        );
      } catch (error) {
        await this.#giveBack(charged, checks, outcomes, nowMs, minTtlMs);
        throw error;
      }
      atMs ??= decision.atMs;
      for (let k = 0; k < indexes.length; k++) outcomes[indexes[k]!] = decision.limits[k]!;
      if (decision.allowed) {
        charged.push({ indexes, atMs: decision.atMs! });
        continue;
      }
      await this.#giveBack(charged, checks, outcomes, nowMs, minTtlMs);
      for (let later = g + 1; later < groups.length; later++) {
        for (const i of groups[later]!) outcomes[i] = notAsked(checks[i]!.spec);
      }
      break;
    }
    return decisionOf(outcomes, atMs);
  }

  /**
   * Gives back every charged group at once, in parallel: one "settle" per group with the charge as a
   * negative delta on the group's own clock (a concurrency slot is released). A give-back that fails
   * leaves the charge standing (reported to `onGiveBackFailure`): the client is limited more, never less.
   */
  async #giveBack(
    charged: readonly ChargedGroup[],
    checks: readonly LimitCheck[],
    outcomes: LimitOutcome[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<void> {
    await Promise.all(
      charged.map(async ({ indexes, atMs }) => {
        const settlements: Settlement[] = indexes.map((i) => {
          const check = checks[i]!;
          const settlement: Settlement = {
            key: check.key,
            spec: check.spec,
            delta: -check.cost,
            admittedAtMs: atMs,
          };
          return check.leaseId === undefined ? settlement : { ...settlement, leaseId: check.leaseId };
        });
        try {
          const settled = await this.#settleGroup(settlements, nowMs, minTtlMs);
          for (let k = 0; k < indexes.length; k++) {
            const { level, remaining, resetMs } = settled[k]!;
            outcomes[indexes[k]!] = { allowed: true, level, remaining, retryAfterMs: 0, resetMs };
          }
        } catch (error) {
          this.#onGiveBackFailure?.(toStoreError(error));
        }
      }),
    );
  }

  /**
   * One EVALSHA ("settle") for all of a request's settlements; on a Cluster, one per slot group, in
   * parallel (each group's settlements are independent of the others').
   */
  async #settle(
    settlements: readonly Settlement[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<SettledLimit[]> {
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertSettlements(settlements);
    const n = settlements.length;
    if (n === 0) return [];
    if (this.isCluster && n > 1) {
      const groups = slotGroups(settlements.map((settlement) => this.#keyPrefix + settlement.key));
      if (groups.length > 1) {
        const settled: SettledLimit[] = new Array(n);
        await Promise.all(
          groups.map(async (indexes) => {
            const results = await this.#settleGroup(
              indexes.map((i) => settlements[i]!),
              nowMs,
              minTtlMs,
            );
            for (let k = 0; k < indexes.length; k++) settled[indexes[k]!] = results[k]!;
          }),
        );
        return settled;
      }
    }
    return this.#settleGroup(settlements, nowMs, minTtlMs);
  }

  /** One "settle" call: `settlements` share one slot on a Cluster. */
  async #settleGroup(
    settlements: readonly Settlement[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<SettledLimit[]> {
    const n = settlements.length;
    const keysAndArgs: string[] = new Array(n);
    for (let i = 0; i < n; i++) keysAndArgs[i] = this.#keyPrefix + settlements[i]!.key;
    for (const settlement of settlements) {
      keysAndArgs.push(
        settlement.spec.algorithm,
        ...scriptArgumentsOf(settlement.spec, settlement.leaseId),
        String(settlement.delta),
        String(settlement.admittedAtMs),
      );
    }
    const reply = await this.#script('settle', n, keysAndArgs, nowMs, minTtlMs);
    const settled = parseSettled(reply, settlements);
    if (settled === undefined) {
      throw new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
    }
    return settled;
  }

  /**
   * One request's script call: `keysAndArgs` holds its `n` keys (one slot on a Cluster), then its
   * per-check arguments. Batched: queued in its route's open batch; otherwise sent at once. Rejects
   * with a `StoreError`.
   */
  #script(
    operation: 'acquire' | 'settle',
    n: number,
    keysAndArgs: string[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<unknown> {
    if (!this.#batching) {
      if (this.#coalesceWrites && !this.#corked) this.#corkUntilTurnEnds();
      return this.#send(n, [
        ...keysAndArgs.slice(0, n),
        operation,
        nowMs,
        minTtlMs,
        String(n),
        ...keysAndArgs.slice(n),
      ]);
    }
    return new Promise((resolve, reject) => {
      const route = this.isCluster ? String(slotOf(keysAndArgs[0]!)) : '';
      let batch = this.#openBatches.get(route);
      // one batch has one clock (the tests-only nowMs): another clock starts the next batch, in order
      if (
        batch !== undefined &&
        (batch.nowMs !== nowMs || batch.minTtlMs !== minTtlMs || batch.keyCount + n > MAX_BATCH_KEYS)
      ) {
        this.#openBatches.delete(route);
        this.#sendBatch(batch);
        batch = undefined;
      }
      if (batch === undefined) {
        batch = { nowMs, minTtlMs, keyCount: 0, requests: [] };
        this.#openBatches.set(route, batch);
      }
      batch.requests.push({ operation, n, keysAndArgs, resolve, reject });
      batch.keyCount += n;
      if (batch.requests.length >= MAX_BATCH_REQUESTS || batch.keyCount >= MAX_BATCH_KEYS) {
        this.#openBatches.delete(route);
        this.#sendBatch(batch);
      } else if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        // setImmediate, not queueMicrotask: microtasks run after each I/O callback, so requests read
        // from different sockets in one turn would never share a batch
        setImmediate(() => this.#flush());
      }
    });
  }

  /** Sends every open batch (the turn ends, or the store closes); several leave in one write. */
  #flush(): void {
    this.#flushScheduled = false;
    if (this.#openBatches.size === 0) return;
    const batches = [...this.#openBatches.values()];
    this.#openBatches.clear();
    const stream = this.client instanceof Redis ? this.client.stream : undefined;
    const cork =
      this.#coalesceWrites && batches.length > 1 && this.client.status === 'ready' && stream?.writable;
    if (cork) stream!.cork();
    for (const batch of batches) this.#sendBatch(batch);
    if (cork) stream!.uncork();
  }

  /** One script call for a batch: the single form for a lone request, else the "batch" form. */
  #sendBatch(batch: Batch): void {
    const { requests, nowMs, minTtlMs } = batch;
    if (requests.length === 1) {
      const { operation, n, keysAndArgs, resolve, reject } = requests[0]!;
      this.#send(n, [
        ...keysAndArgs.slice(0, n),
        operation,
        nowMs,
        minTtlMs,
        String(n),
        ...keysAndArgs.slice(n),
      ]).then(resolve, reject);
      return;
    }
    const keys: string[] = [];
    const args: string[] = ['batch', nowMs, minTtlMs, String(requests.length)];
    for (const { operation, n, keysAndArgs } of requests) {
      for (let i = 0; i < n; i++) keys.push(keysAndArgs[i]!);
      args.push(operation, String(n), String(keysAndArgs.length - n));
      for (let i = n; i < keysAndArgs.length; i++) args.push(keysAndArgs[i]!);
    }
    this.#send(keys.length, keys.concat(args)).then(
      (reply) => {
        if (!Array.isArray(reply) || reply.length !== requests.length) {
          const error = new StoreError(
            'STORE_ERROR',
            `unreadable limiter batch reply: ${JSON.stringify(reply)}`,
          );
          for (const request of requests) request.reject(error);
          return;
        }
        for (let j = 0; j < requests.length; j++) {
          const one: unknown = reply[j];
          if (one instanceof Error) requests[j]!.reject(toStoreError(one));
          else requests[j]!.resolve(one);
        }
      },
      (error: StoreError) => {
        for (const request of requests) request.reject(error);
      },
    );
  }

  /** Sends one script call; rejects with a `StoreError`. */
  async #send(numberOfKeys: number, keysAndArgs: string[]): Promise<unknown> {
    this.#scriptCalls++;
    try {
      return await this.client.sluiceAcquire(numberOfKeys, ...keysAndArgs);
    } catch (error) {
      throw toStoreError(error);
    }
  }

  #corkUntilTurnEnds(): void {
    if (!(this.client instanceof Redis)) return;
    const stream = this.client.stream;
    // not connected: the command fails at once (no offline queue), nothing to hold
    if (this.client.status !== 'ready' || !stream?.writable) return;
    this.#corked = true;
    stream.cork();
    setImmediate(() => {
      this.#corked = false;
      stream.uncork();
    });
  }
}

/** One request's script call waiting in a batch. */
interface PendingCall {
  readonly operation: 'acquire' | 'settle';
  /** its number of keys: `keysAndArgs` is its keys, then its per-check arguments */
  readonly n: number;
  readonly keysAndArgs: readonly string[];
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: StoreError) => void;
}

/** The calls for one route (one Redis, or one slot of a Cluster) that will leave as one script call. */
interface Batch {
  /** the batch's clock: '' (Redis TIME) or a tests-only simulated one */
  readonly nowMs: string;
  readonly minTtlMs: string;
  keyCount: number;
  readonly requests: PendingCall[];
}

/** A slot group an earlier call charged, and its decision's clock (for the give-back). */
interface ChargedGroup {
  readonly indexes: readonly number[];
  readonly atMs: number;
}

/**
 * The outcome reported for a limit after the one that denied, in another slot: not asked (asking would
 * charge it). Reported as its whole quota, allowed, with nothing to wait for.
 */
function notAsked(spec: LimitSpec): LimitOutcome {
  const level = algorithmOf(spec).idleLevel(spec);
  return outcomeOf(spec, { allowed: true, level, retryAfterMs: 0, resetMs: 0 });
}

function parseReply(reply: unknown, checks: readonly LimitCheck[]): StoreDecision {
  const n = checks.length;
  const outcomes =
    Array.isArray(reply) && reply.length === 4 * n + 1 ? parseOutcomes(reply, checks) : undefined;
  const atMs = outcomes === undefined ? Number.NaN : Number((reply as unknown[])[4 * n]);
  if (outcomes === undefined || !Number.isFinite(atMs))
    throw new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
  return decisionOf(outcomes, atMs);
}

function parseSettled(reply: unknown, settlements: readonly Settlement[]): SettledLimit[] | undefined {
  if (!Array.isArray(reply) || reply.length !== 2 * settlements.length) return undefined;
  const settled: SettledLimit[] = new Array(settlements.length);
  for (let i = 0; i < settlements.length; i++) {
    const levelText: unknown = reply[2 * i];
    const resetMs: unknown = reply[2 * i + 1];
    const level = typeof levelText === 'string' ? Number(levelText) : Number.NaN;
    if (!Number.isFinite(level) || typeof resetMs !== 'number') return undefined;
    settled[i] = settledOf(settlements[i]!.spec, level, resetMs);
  }
  return settled;
}

function parseOutcomes(reply: unknown[], checks: readonly LimitCheck[]): LimitOutcome[] | undefined {
  const outcomes: LimitOutcome[] = new Array(checks.length);
  for (let i = 0; i < checks.length; i++) {
    const [allowed, levelText, retryAfterMs, resetMs] = reply.slice(4 * i, 4 * i + 4);
    const level = typeof levelText === 'string' ? Number(levelText) : Number.NaN;
    if (
      !(allowed === 0 || allowed === 1) ||
      !Number.isFinite(level) ||
      typeof retryAfterMs !== 'number' ||
      typeof resetMs !== 'number'
    ) {
      return undefined;
    }
    outcomes[i] = outcomeOf(checks[i]!.spec, { allowed: allowed === 1, level, retryAfterMs, resetMs });
  }
  return outcomes;
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

function toStoreError(error: unknown): StoreError {
  if (error instanceof StoreError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof Error && error.name === 'ReplyError') {
    return new StoreError('STORE_ERROR', `Redis: ${message}`, { cause: error });
  }
  if (/timed out/i.test(message))
    return new StoreError('STORE_TIMEOUT', `Redis: ${message}`, { cause: error });
  return new StoreError('STORE_UNAVAILABLE', `Redis: ${message}`, { cause: error });
}

/**
 * The Cluster client a store creates: no offline queue (a decision fails at once, never waits),
 * decisions only on masters, every node's commands bounded by the command timeout, one retry, and a
 * bounded number of MOVED/ASK redirections per command.
 */
function createClusterClient(seeds: ClusterSeeds, options: RedisStoreOptions): Cluster {
  const nodes = seeds.clusterNodes.map((text) => {
    const node = parseHostPort(text);
    if (!node) throw new RangeError(`not a host:port Redis Cluster node: ${JSON.stringify(text)}`);
    return node;
  });
  if (nodes.length === 0) throw new RangeError('a Redis Cluster needs at least one seed node');
  const clusterOptions: ClusterOptions = {
    enableOfflineQueue: false,
    scaleReads: 'master',
    maxRedirections: 6,
    retryDelayOnFailover: 50,
    retryDelayOnClusterDown: 50,
    retryDelayOnTryAgain: 50,
    retryDelayOnMoved: 0,
    slotsRefreshTimeout: 1_000,
    clusterRetryStrategy: reconnectDelayMs,
    enableAutoPipelining: options.autoPipelining ?? false,
    redisOptions: {
      commandTimeout: options.commandTimeoutMs ?? 50,
      connectTimeout: options.connectTimeoutMs ?? 2_000,
      maxRetriesPerRequest: 1,
    },
  };
  return new Cluster(nodes, clusterOptions);
}
