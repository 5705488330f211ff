/**
 * The one place an ioredis client is made, for the limiter (the gateway's store) and for analytics
 * (the gateway's offender counts, the rules API's reads), on one Redis or a Redis Cluster. Both want
 * the same thing from it: a command fails at once while Redis is away rather than waiting in a queue,
 * and the client reconnects by itself in the background. They differ only in how long a command may
 * take (a decision is on a request's path; an analytics read is not).
 */
import type { Writable } from 'node:stream';
import { Cluster, type ClusterOptions, Command, Redis, type RedisOptions } from 'ioredis';
import { parseHostPort } from '../../config/host-port.js';
import { StoreError } from '../store.js';

/** An ioredis client on one Redis, or on a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** A Redis Cluster to connect to: its seed nodes as `host:port` (`REDIS_CLUSTER_NODES`). */
export interface ClusterSeeds {
  readonly clusterNodes: readonly string[];
}

/** Where a client connects: a `redis://` / `rediss://` URL, or a Redis Cluster's seeds. */
export type RedisTarget = string | ClusterSeeds;

export interface RedisClientOptions {
  /** how long one command may take before it fails, ms; default 50 (`STORE_TIMEOUT_MS`'s default) */
  commandTimeoutMs?: number;
  /** how long connecting may take, ms; default 2000 */
  connectTimeoutMs?: number;
  /** let ioredis send the commands of one event-loop tick as one pipeline; default false */
  autoPipelining?: boolean;
}

export function isClusterSeeds(value: unknown): value is ClusterSeeds {
  return typeof value === 'object' && value !== null && 'clusterNodes' in value;
}

/** Reconnect backoff: 100 ms, 200 ms, … up to 2 s between attempts, forever. */
function reconnectDelayMs(attempt: number): number {
  return Math.min(100 * attempt, 2_000);
}

/**
 * A client with no offline queue (a command while Redis is away fails at once, never waits), one
 * retry per command, reconnecting forever. On a Cluster: commands only on masters, every node's
 * commands bounded by the command timeout, and a bounded number of MOVED/ASK redirections per
 * command. It has an `error` listener already: without one ioredis prints every failed reconnect,
 * and failures reach the caller through its commands anyway. Throws a `RangeError` for a seed list
 * that is empty or holds something other than `host:port`.
 */
export function createRedisClient(target: RedisTarget, options: RedisClientOptions = {}): RedisClient {
  const commandTimeout = options.commandTimeoutMs ?? 50;
  const connectTimeout = options.connectTimeoutMs ?? 2_000;
  const enableAutoPipelining = options.autoPipelining ?? false;
  let client: RedisClient;
  if (isClusterSeeds(target)) {
    const nodes = target.clusterNodes.map((text) => {
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
      enableAutoPipelining,
      redisOptions: { commandTimeout, connectTimeout, maxRetriesPerRequest: 1 },
    };
    client = new Cluster(nodes, clusterOptions);
  } else {
    const redisOptions: RedisOptions = {
      enableOfflineQueue: false,
      commandTimeout,
      connectTimeout,
      maxRetriesPerRequest: 1,
      retryStrategy: reconnectDelayMs,
      enableAutoPipelining,
    };
    client = new Redis(target, redisOptions);
  }
  client.on('error', () => {});
  return client;
}

/** Resolves once `client` is ready; rejects with `STORE_UNAVAILABLE` after `timeoutMs`. */
export function whenReady(client: RedisClient, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = (error?: StoreError) => {
      clearTimeout(timer);
      client.off('ready', onReady);
      client.off('end', onEnd);
      if (error) reject(error);
      else resolve();
    };
    const onReady = () => done();
    const onEnd = () => done(new StoreError('STORE_UNAVAILABLE', 'Redis connection ended'));
    const timer = setTimeout(
      () => done(new StoreError('STORE_UNAVAILABLE', `Redis not ready within ${timeoutMs} ms`)),
      timeoutMs,
    );
    client.on('ready', onReady);
    client.on('end', onEnd);
  });
}

/**
 * The socket of a one-Redis client that is connected now, whose writes may be held (`cork`) so that
 * several commands leave in one write; undefined on a Cluster (one socket per master) or while not
 * connected (a command then fails at once, nothing to hold).
 */
export function connectedSocketOf(client: RedisClient): Writable | undefined {
  if (!(client instanceof Redis) || client.status !== 'ready') return undefined;
  const stream = client.stream;
  return stream?.writable ? stream : undefined;
}

/** What a command is made with before its arguments are set: never changed (ioredis copies it). */
const NO_ARGUMENTS: readonly string[] = [];

/**
 * `client.fcall(name, numberOfKeys, ...keysAndArgs)` without ioredis's copy of the arguments: its
 * Command copies them with Array.prototype.flat(), which V8 runs at 100–150 ns per element, about 20
 * µs for a batch of concurrency takes and give-backs (issue 16: the largest single cost of such a
 * gateway's client side). The arguments here are strings already: nothing to flatten or convert. The
 * client's own `keyPrefix` (a client the caller gave) goes before each key, as ioredis would put it.
 */
export function fcall(
  client: RedisClient,
  name: string,
  numberOfKeys: number,
  keysAndArgs: readonly string[],
): Promise<unknown> {
  const command = new Command('fcall', NO_ARGUMENTS as string[], { replyEncoding: 'utf8' });
  const args = new Array<string>(keysAndArgs.length + 2);
  args[0] = name;
  args[1] = String(numberOfKeys);
  const prefix = client.options.keyPrefix;
  for (let i = 0; i < keysAndArgs.length; i++) {
    args[i + 2] = prefix && i < numberOfKeys ? prefix + keysAndArgs[i]! : keysAndArgs[i]!;
  }
  command.args = args;
  client.sendCommand(command);
  return command.promise;
}
