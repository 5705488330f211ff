/**
 * The Redis limiter store: one script call (acquire.lua) per request, whatever its number of limits,
 * on Redis's own clock (`TIME`).
 *
 * The script is registered once per client with `defineCommand` (only if absent); ioredis then
 * sends EVALSHA and falls back to EVAL by itself when Redis answers NOSCRIPT (after a restart or
 * `SCRIPT FLUSH`). Commands are never queued while Redis is away (`enableOfflineQueue: false`):
 * a decision fails at once with a `StoreError`, and the gateway's `STORE_FAILURE` policy decides.
 *
 * Imported from the `@sluice/shared/redis` subpath only, so that the root entry never loads ioredis.
 */
import { Redis, type RedisOptions, type Result } from 'ioredis';
import { ACQUIRE_LUA } from './acquire-script.js';
import { LimitArgumentError } from './algorithms/algorithm.js';
import { algorithmOf } from './algorithms/index.js';
import { assertChecks, assertSettlements, decisionOf, outcomeOf, settledOf } from './engine.js';
import type { Decision, LimitCheck, LimitOutcome, SettledLimit, Settlement } from './limits.js';
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
   * Hold the connection's writes until the end of the event-loop turn (`cork`, uncorked by
   * `setImmediate`), so the decisions of one turn leave in one write and Redis reads them in one
   * read; default false. Unlike `autoPipelining` it adds no pipeline object per batch and never
   * waits for one batch's replies before sending the next: each request is still its own EVALSHA.
   */
  coalesceWrites?: boolean;
}

/** Reconnect backoff: 100 ms, 200 ms, … up to 2 s between attempts, forever. */
function reconnectDelayMs(attempt: number): number {
  return Math.min(100 * attempt, 2_000);
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  /** The ioredis client; attach `error` listeners here to log connection trouble. */
  readonly client: Redis;
  readonly #keyPrefix: string;
  /** only a client the store created is quit by `close()` */
  readonly #ownsClient: boolean;
  readonly #coalesceWrites: boolean;
  /** the connection is corked until the end of this event-loop turn */
  #corked = false;
  #closed = false;

  /**
   * @param redis an ioredis client to use (the caller keeps owning it; configure it with
   *   `enableOfflineQueue: false` and a `commandTimeout` to get fast failures), or a `redis://` /
   *   `rediss://` URL for a client the store creates and owns.
   */
  constructor(redis: Redis | string, options: RedisStoreOptions = {}) {
    this.#keyPrefix = options.keyPrefix ?? '';
    this.#coalesceWrites = options.coalesceWrites ?? false;
    if (typeof redis === 'string') {
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
    // no numberOfKeys: the call passes it first, as many keys as the request has checks
    if (typeof this.client[ACQUIRE_COMMAND] !== 'function') {
      this.client.defineCommand(ACQUIRE_COMMAND, { lua: ACQUIRE_LUA });
    }
  }

  acquire(checks: readonly LimitCheck[]): Promise<Decision> {
    return this.#acquire(checks, '', '');
  }

  /**
   * TESTS ONLY: decides on a simulated clock (`nowMs`) instead of Redis `TIME`, and keeps written keys
   * at least `minTtlMs` so real-time expiry cannot disturb the simulation. Production never calls it.
   */
  acquireAt(checks: readonly LimitCheck[], nowMs: number, minTtlMs = 0): Promise<Decision> {
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
    if (!this.#ownsClient) return;
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect(); // not connected: stop reconnecting instead
    }
  }

  /**
   * The one place a decision meets Redis: one EVALSHA for all of a request's checks. A batched mode
   * slots in here: queue `(keys, args, resolve, reject)` and flush once per tick as one script call
   * per node, settling each caller from its slice of the reply. `coalesceWrites` (or
   * `autoPipelining`) already gives the one-write half of that for a client the store creates.
   */
  async #acquire(checks: readonly LimitCheck[], nowMs: string, minTtlMs: string): Promise<Decision> {
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertChecks(checks);
    const n = checks.length;
    if (n === 0) return decisionOf([]);
    const keysAndArgs: string[] = new Array(n);
    for (let i = 0; i < n; i++) keysAndArgs[i] = this.#keyPrefix + checks[i]!.key;
    keysAndArgs.push('acquire', nowMs, minTtlMs, String(n));
    for (const check of checks) {
      keysAndArgs.push(
        check.spec.algorithm,
        String(check.cost),
        ...algorithmOf(check.spec).luaArguments(check.spec, check.leaseId),
      );
    }
    if (this.#coalesceWrites && !this.#corked) this.#corkUntilTurnEnds();
    let reply: AcquireReply;
    try {
      reply = await this.client.sluiceAcquire(n, ...keysAndArgs);
    } catch (error) {
      throw toStoreError(error);
    }
    return parseReply(reply, checks);
  }

  /** One EVALSHA ("settle") for all of a request's settlements. */
  async #settle(
    settlements: readonly Settlement[],
    nowMs: string,
    minTtlMs: string,
  ): Promise<SettledLimit[]> {
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    assertSettlements(settlements);
    const n = settlements.length;
    if (n === 0) return [];
    const keysAndArgs: string[] = new Array(n);
    for (let i = 0; i < n; i++) keysAndArgs[i] = this.#keyPrefix + settlements[i]!.key;
    keysAndArgs.push('settle', nowMs, minTtlMs, String(n));
    for (const settlement of settlements) {
      keysAndArgs.push(
        settlement.spec.algorithm,
        ...algorithmOf(settlement.spec).luaArguments(settlement.spec, settlement.leaseId),
        String(settlement.delta),
        String(settlement.admittedAtMs),
      );
    }
    if (this.#coalesceWrites && !this.#corked) this.#corkUntilTurnEnds();
    let reply: AcquireReply;
    try {
      reply = await this.client.sluiceAcquire(n, ...keysAndArgs);
    } catch (error) {
      throw toStoreError(error);
    }
    const settled = parseSettled(reply, settlements);
    if (settled === undefined) {
      throw new StoreError('STORE_ERROR', `unreadable limiter reply: ${JSON.stringify(reply)}`);
    }
    return settled;
  }

  #corkUntilTurnEnds(): void {
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

function parseReply(reply: unknown, checks: readonly LimitCheck[]): Decision {
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
