/**
 * The limiter as a Redis Function library (Redis >= 7): loaded once per node with `FUNCTION LOAD`
 * (on a Cluster, on every master; replicas get it by replication), then called with FCALL. A script
 * sent by EVALSHA runs its whole text on every call, making its helpers and algorithms again each time;
 * a library's setup runs once, at its first call after a load. That was about a third of a lone call's
 * work in Redis (docs/benchmarks.md).
 *
 * The store never depends on it: until the library is loaded, and for good where it cannot be (Redis 5
 * or 6, or an ACL user without FUNCTION), calls go by EVALSHA, which runs the same Lua. A node that lost
 * the library (a restart without persistence, `FUNCTION FLUSH`, a new master) answers "Function not
 * found": that call is sent again by EVALSHA, and the library is loaded again.
 */
import { Cluster, type Redis } from 'ioredis';
import { ACQUIRE_LIBRARY } from '../acquire-script.js';
import type { RedisClient } from './client.js';

/** How long after a load that failed for a passing reason (a timeout, a lost connection) it is tried again. */
const RETRY_MS = 1_000;

/** How calls reach the script: FCALL of the library's function, or EVALSHA of the same Lua. */
export type ScriptMode = 'function' | 'eval';

export class FunctionLibrary {
  readonly #client: RedisClient;
  #mode: ScriptMode = 'eval';
  /** FUNCTION is not there (Redis < 7) or not allowed (ACL): EVALSHA for good */
  #unavailable = false;
  #loading: Promise<void> | undefined;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #onReady = () => void this.load();

  constructor(client: RedisClient) {
    this.#client = client;
    // a reconnection may be to a restarted Redis, which kept no function
    client.on('ready', this.#onReady);
    if (client.status === 'ready') void this.load();
  }

  /** FCALL once the library is loaded; EVALSHA before, and where it cannot be. */
  get mode(): ScriptMode {
    return this.#mode;
  }

  /** Loads the library on the node(s); resolves when that is done or given up, never rejects. */
  load(): Promise<void> {
    if (this.#unavailable || this.#closed) return Promise.resolve();
    if (this.#loading === undefined) {
      this.#loading = this.#loadOnMasters().finally(() => {
        this.#loading = undefined;
      });
    }
    return this.#loading;
  }

  /** The load in flight, or a first one while the library is not loaded; never rejects. */
  settled(): Promise<void> {
    if (this.#loading !== undefined) return this.#loading;
    return this.#mode === 'function' ? Promise.resolve() : this.load();
  }

  /** A call found no function on its node: EVALSHA until it is loaded again. */
  lost(): void {
    this.#mode = 'eval';
    void this.load();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#client.off('ready', this.#onReady);
  }

  async #loadOnMasters(): Promise<void> {
    const nodes: Redis[] = this.#client instanceof Cluster ? this.#client.nodes('master') : [this.#client];
    try {
      if (nodes.length === 0) throw new Error('no master known yet');
      // REPLACE: loading the same text again is harmless, and several gateways may race to load it
      await Promise.all(nodes.map((node) => node.call('FUNCTION', 'LOAD', 'REPLACE', ACQUIRE_LIBRARY)));
      this.#mode = 'function';
    } catch (error) {
      this.#mode = 'eval';
      if (cannotLoad(error)) {
        this.#unavailable = true;
        return;
      }
      if (!this.#closed && this.#retry === undefined) {
        this.#retry = setTimeout(() => {
          this.#retry = undefined;
          void this.load();
        }, RETRY_MS);
        this.#retry.unref();
      }
    }
  }
}

/** Redis answered that FUNCTION is unknown (Redis < 7) or not allowed to this user: it never will be. */
function cannotLoad(error: unknown): boolean {
  if (!(error instanceof Error) || error.name !== 'ReplyError') return false;
  return /unknown command|NOPERM/i.test(error.message);
}

/** A call's error says its node has no such function (lost since it was loaded). */
export function isFunctionMissing(error: unknown): boolean {
  return (
    error instanceof Error && error.name === 'ReplyError' && /^ERR Function not found/.test(error.message)
  );
}
