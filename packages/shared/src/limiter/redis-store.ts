/**
 * The Redis bucket store: one script call per decision, on Redis's own clock (`TIME`).
 *
 * The script is registered once per client with `defineCommand` (only if absent); ioredis then
 * sends EVALSHA and falls back to EVAL by itself when Redis answers NOSCRIPT (after a restart or
 * `SCRIPT FLUSH`). Commands are never queued while Redis is away (`enableOfflineQueue: false`):
 * a decision fails at once with a `StoreError`, and the gateway's `STORE_FAILURE` policy decides.
 */
import { readFileSync } from 'node:fs';
import { Redis, type RedisOptions, type Result } from 'ioredis';
import { assertBucketArguments } from './bucket.js';
import { type Decision, type DecisionRequest, type Store, StoreError } from './store.js';

/** The Lua source (`token-bucket.lua`, copied beside the compiled file by the build). */
export const TOKEN_BUCKET_LUA: string = readFileSync(new URL('./token-bucket.lua', import.meta.url), 'utf8');

/** The ioredis command name the script is registered under. */
export const TOKEN_BUCKET_COMMAND = 'sluiceTokenBucket';

/** What the script returns: allowed 1|0, balance as a '%.17g' string, then two whole ms. */
export type TokenBucketReply = [allowed: number, balance: string, retryAfterMs: number, fullInMs: number];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** KEYS[1] and ARGV[1..7] as documented at the top of token-bucket.lua. */
    sluiceTokenBucket(
      key: string,
      capacity: string,
      refill: string,
      periodMs: string,
      maxDebt: string,
      cost: string,
      nowMs: string,
      minTtlMs: string,
    ): Result<TokenBucketReply, Context>;
  }
}

export interface RedisStoreOptions {
  /** prepended to every `request.key` (outside its hash-tag braces), e.g. `"sluice:"`; default none */
  keyPrefix?: string;
  /** per-command timeout in ms, for a client the store creates; default 50 (SPEC `STORE_TIMEOUT_MS`) */
  commandTimeoutMs?: number;
  /** connect timeout in ms, for a client the store creates; default 2000 */
  connectTimeoutMs?: number;
  /** let ioredis send the decisions of one event-loop tick as one pipeline; default false */
  autoPipelining?: boolean;
  /**
   * Hold the connection's writes until the end of the event-loop turn (`cork`, uncorked by
   * `setImmediate`), so the decisions of one turn leave in one write and Redis reads them in one
   * read; default false. Unlike `autoPipelining` it adds no pipeline object per batch and never
   * waits for one batch's replies before sending the next: each decision is still its own EVALSHA.
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
      // Without a listener ioredis prints every reconnect failure; failures surface through decide().
      this.client.on('error', () => {});
      this.#ownsClient = true;
    } else {
      this.client = redis;
      this.#ownsClient = false;
    }
    if (typeof this.client[TOKEN_BUCKET_COMMAND] !== 'function') {
      this.client.defineCommand(TOKEN_BUCKET_COMMAND, { numberOfKeys: 1, lua: TOKEN_BUCKET_LUA });
    }
  }

  decide(request: DecisionRequest): Promise<Decision> {
    return this.#evaluate(request, '', '');
  }

  /**
   * TESTS ONLY: decides on a simulated clock (`nowMs`) instead of Redis `TIME`, and keeps the key
   * at least `minTtlMs` so real-time expiry cannot disturb the simulation. Production never calls it.
   */
  decideAt(request: DecisionRequest, nowMs: number, minTtlMs = 0): Promise<Decision> {
    assertBucketArguments(request.limits, request.cost, nowMs);
    return this.#evaluate(request, String(nowMs), String(minTtlMs));
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
   * The one place a decision meets Redis. A batched mode slots in here: queue
   * `(key, args, resolve, reject)` and flush once per tick (`queueMicrotask`) as one pipeline, or
   * as one script call over many keys on a single node, settling each caller from its slot of the
   * reply. `coalesceWrites` (or `autoPipelining`) already gives the one-write half of that for a
   * client the store creates.
   */
  async #evaluate(request: DecisionRequest, nowMs: string, minTtlMs: string): Promise<Decision> {
    if (this.#closed) throw new StoreError('STORE_UNAVAILABLE', 'the Redis store is closed');
    const { limits, cost } = request;
    assertBucketArguments(limits, cost);
    if (this.#coalesceWrites && !this.#corked) this.#corkUntilTurnEnds();
    let reply: TokenBucketReply;
    try {
      reply = await this.client.sluiceTokenBucket(
        this.#keyPrefix + request.key,
        String(limits.capacity),
        String(limits.refill),
        String(limits.periodMs),
        String(limits.maxDebt),
        String(cost),
        nowMs,
        minTtlMs,
      );
    } catch (error) {
      throw toStoreError(error);
    }
    return parseReply(reply);
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

function parseReply(reply: unknown): Decision {
  if (Array.isArray(reply) && reply.length === 4) {
    const [allowed, balanceText, retryAfterMs, fullInMs] = reply as unknown[];
    const balance = typeof balanceText === 'string' ? Number(balanceText) : Number.NaN;
    if (
      (allowed === 0 || allowed === 1) &&
      Number.isFinite(balance) &&
      typeof retryAfterMs === 'number' &&
      typeof fullInMs === 'number'
    ) {
      return { allowed: allowed === 1, balance, retryAfterMs, fullInMs };
    }
  }
  throw new StoreError('STORE_ERROR', `unreadable token bucket reply: ${JSON.stringify(reply)}`);
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
