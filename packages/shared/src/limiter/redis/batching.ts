/**
 * The batching channel: the script calls bound for one Redis node within a few event-loop turns leave as
 * ONE call of the script's "batch" form, which decides them one by one, each all or nothing, in arrival
 * order, exactly as separate calls would (on the batch's one clock): batching changes the cost, never a
 * result. On a Cluster a batch holds the requests of one hash slot only (one script call may touch one
 * slot). A batch is sent one turn after the turn it opened in (`setImmediate`), two when that turn
 * brought it more requests (HELD_TURNS_MAX), or at once when it reaches MAX_BATCH_REQUESTS requests
 * or MAX_BATCH_KEYS keys: under load the turns waited gather more requests into one call, and a
 * concurrency rule's give-back or a charged rule's settlement finds decisions to ride with (issue 16). An
 * acquire exactly like the request just before it (the same keys and limits: a hot client) rides on
 * that request as an "again" of the script: no arguments and no reply of its own, its decision made
 * here from the state the request before left (see `AgainDecoder`). Takes of slots in a row on the
 * same keys ride the same way, and so do give-backs of slots taken by one call, each sending only its
 * lease ids: one ZADD, or one ZREM, of them all. A failed batch call fails each of its requests with the same `StoreError`.
 */
import type { Writable } from 'node:stream';
import { StoreError } from '../store.js';
import { type ScriptCall, type ScriptChannel, type SendScript, sendSingle, toStoreError } from './script.js';

/**
 * Most requests in one batched script call. Redis runs a script alone: nothing else is served while it
 * runs, so a batch must stay short. A one-limit request costs Redis about 8 µs inside the script
 * (bench/script.ts, in batches of 16), so 64 of them hold Redis well under a millisecond, while a gateway
 * at full speed rarely has more than a few dozen decisions waiting in one turn anyway.
 */
export const MAX_BATCH_REQUESTS = 64;
/**
 * Most keys in one batched script call: stacked rules cost per key (each read and written), so the
 * cap counts keys too; 128 keys is the same bound in time as 64 one-limit requests, twice over.
 */
export const MAX_BATCH_KEYS = 128;
/**
 * Most turns an open batch waits past the one it opened in. Under load each turn's I/O brings more
 * requests, and every request a batch gathers saves a script call: Redis's cost per call (reading it,
 * calling the function, `TIME`, the reply) and the gateway's (a write, a read, a context switch to
 * Redis and back) are most of an exact decision's price (issue 16: 0.15 → about 0.085 calls per
 * request at 16 connections). Idle, a turn with nothing to read passes in microseconds, so a lone
 * request waits one empty turn; a turn that brought nothing new ends the wait early.
 */
export const HELD_TURNS_MAX = 2;

/** One request's script call waiting in a batch. */
interface PendingCall {
  readonly call: ScriptCall<unknown, unknown>;
  readonly resolve: (decoded: unknown) => void;
  readonly reject: (error: StoreError) => void;
  /** the requests exactly like this one that came right after it, sent as its "again" */
  again: PendingCall[] | undefined;
}

/**
 * `request` may ride as an "again" of `before`: both allow it and make the same operation on the same
 * keys and limits; a take or give-back of slots sends its own lease ids, one per key.
 */
function isAgainOf({ call: request }: PendingCall, previous: PendingCall | undefined): boolean {
  if (previous === undefined) return false;
  const before = previous.call;
  if (
    request.decodeAgain === undefined ||
    before.decodeAgain !== request.decodeAgain ||
    before.operation !== request.operation
  ) {
    return false;
  }
  const n = request.keys.length;
  if (request.args !== before.args || n !== before.keys.length) return false;
  // ids (slots): one per key, the request before sending as many; none only for an acquire
  const ids = request.ids;
  if (
    ids === undefined
      ? request.operation !== 'acquire' || before.ids !== undefined
      : ids.length !== n || before.ids?.length !== n
  ) {
    return false;
  }
  for (let i = 0; i < n; i++) if (request.keys[i] !== before.keys[i]) return false;
  return true;
}

/** The requests of an "again", answered from its one reply (or all failed with what decoding threw). */
function answerAgain(requests: readonly PendingCall[], reply: unknown): void {
  let decoded: unknown[];
  try {
    decoded = requests[0]!.call.decodeAgain!(
      reply,
      requests.map((request) => request.call.context),
    );
  } catch (error) {
    for (const request of requests) request.reject(error as StoreError);
    return;
  }
  for (let i = 0; i < requests.length; i++) requests[i]!.resolve(decoded[i]);
}

/** A request's own reply, decoded where it arrives: resolves its promise, or rejects it with what decoding threw. */
function answer(request: PendingCall, reply: unknown): void {
  let decoded: unknown;
  try {
    decoded = request.call.decode(reply, request.call.context);
  } catch (error) {
    request.reject(error as StoreError);
    return;
  }
  request.resolve(decoded);
}

/**
 * Some key is used by more than one of the requests (a hot client, a limit shared by everyone): the
 * script then keeps their states pending and writes each once ("batch-repeats"), which costs a batch
 * of different keys more than it saves. Only a hint: both forms decide alike.
 */
function keysRepeat(requests: readonly PendingCall[]): boolean {
  // a set of this call's own, not one emptied after each use: see `openBatches` on why
  const seenKeys = new Set<string>();
  let repeats = false;
  outer: for (const { call } of requests) {
    for (const key of call.keys) {
      if (seenKeys.has(key)) {
        repeats = true;
        break outer;
      }
      seenKeys.add(key);
    }
  }
  return repeats;
}

/** The calls for one route (one Redis, or one slot of a Cluster) that will leave as one script call. */
interface Batch {
  /** the batch's clock: '' (Redis TIME) or the store's own */
  readonly nowMs: string;
  readonly minTtlMs: string;
  keyCount: number;
  /** its requests, those riding as an "again" included (what the cap counts) */
  decisions: number;
  /** the requests that head an entry of the batch, each with its "again" riders */
  readonly requests: PendingCall[];
}

export class BatchingChannel implements ScriptChannel {
  readonly #send: SendScript;
  readonly #routeOf: (firstKey: string) => string;
  readonly #socketToCork: (() => Writable | undefined) | undefined;
  /**
   * Each route's open batch; undefined once sent. A route's entry is set, never deleted, and the map
   * never cleared: a Map deleted from and cleared every turn makes a new hash table each time, and V8
   * links each discarded table to the next one, the discarded table still holding the batches it held.
   * One of those tables promoted to old space (a pause, an idle moment) then keeps every later table
   * and its batches alive through each young-generation collection: 2 MB of dead batches copied and
   * promoted per scavenge, scavenges of 10 ms instead of 1, until the old space is collected (issue 16).
   * A route is one Redis or one Cluster slot: at most 16,384 entries.
   */
  readonly #openBatches = new Map<string, Batch | undefined>();
  /** the routes whose batch opened since the last flush, in order (a route sent early may repeat) */
  #openRoutes: string[] = [];
  #flushScheduled = false;
  /** requests asked since the last flush, and how many there were when the last turn ended */
  #asked = 0;
  #askedAtTurnEnd = 0;
  /** the turns the open batches have waited past the one they opened in */
  #heldTurns = 0;

  /**
   * @param routeOf the route of a request from its first key: '' on one Redis, its slot on a Cluster
   * @param socketToCork the socket to hold while the batches one turn ends with are written, so that
   *   several (several slots, or past the cap) leave in one write; undefined: each its own write
   */
  constructor(
    send: SendScript,
    routeOf: (firstKey: string) => string,
    socketToCork: (() => Writable | undefined) | undefined,
  ) {
    this.#send = send;
    this.#routeOf = routeOf;
    this.#socketToCork = socketToCork;
  }

  call<T, C>(call: ScriptCall<T, C>): Promise<T> {
    const { keys, nowMs, minTtlMs } = call;
    return new Promise<T>((resolve, reject) => {
      const route = this.#routeOf(keys[0]!);
      const n = keys.length;
      let batch = this.#openBatches.get(route);
      // one batch has one clock: a call on another clock starts the next batch, in order
      if (
        batch !== undefined &&
        (batch.nowMs !== nowMs || batch.minTtlMs !== minTtlMs || batch.keyCount + n > MAX_BATCH_KEYS)
      ) {
        this.#openBatches.set(route, undefined);
        this.#sendBatch(batch);
        batch = undefined;
      }
      if (batch === undefined) {
        batch = { nowMs, minTtlMs, keyCount: 0, decisions: 0, requests: [] };
        this.#openBatches.set(route, batch);
        this.#openRoutes.push(route);
      }
      const request: PendingCall = {
        call: call as ScriptCall<unknown, unknown>,
        resolve: resolve as (decoded: unknown) => void,
        reject,
        again: undefined,
      };
      const before = batch.requests[batch.requests.length - 1];
      if (isAgainOf(request, before)) {
        if (before!.again === undefined) before!.again = [request];
        else before!.again.push(request);
      } else {
        batch.requests.push(request);
        batch.keyCount += n;
      }
      batch.decisions++;
      this.#asked++;
      if (batch.decisions >= MAX_BATCH_REQUESTS || batch.keyCount >= MAX_BATCH_KEYS) {
        this.#openBatches.set(route, undefined);
        this.#sendBatch(batch);
      } else if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        // setImmediate, not queueMicrotask: microtasks run after each I/O callback, so requests read
        // from different sockets in one turn would never share a batch
        setImmediate(this.#turnEnded);
      }
    });
  }

  /**
   * A turn with open batches is over: they wait one turn more, and one more again while the turn they
   * waited brought more requests (HELD_TURNS_MAX), then leave.
   */
  readonly #turnEnded = (): void => {
    const grew = this.#asked > this.#askedAtTurnEnd;
    if (this.#heldTurns === 0 || (grew && this.#heldTurns < HELD_TURNS_MAX)) {
      this.#heldTurns++;
      this.#askedAtTurnEnd = this.#asked;
      setImmediate(this.#turnEnded);
      return;
    }
    this.flush();
  };

  /** Sends every open batch (the turn ends, or the store closes); several leave in one write. */
  flush(): void {
    this.#flushScheduled = false;
    this.#heldTurns = 0;
    this.#asked = 0;
    this.#askedAtTurnEnd = 0;
    const routes = this.#openRoutes;
    if (routes.length === 0) return;
    this.#openRoutes = [];
    const batches: Batch[] = [];
    for (const route of routes) {
      const batch = this.#openBatches.get(route);
      if (batch === undefined) continue; // sent early (a cap, another clock), or listed twice
      this.#openBatches.set(route, undefined);
      batches.push(batch);
    }
    const socket = batches.length > 1 ? this.#socketToCork?.() : undefined;
    socket?.cork();
    for (const batch of batches) this.#sendBatch(batch);
    socket?.uncork();
  }

  /** One script call for a batch: the single form for a lone request, else the "batch" form. */
  #sendBatch(batch: Batch): void {
    const { requests, nowMs, minTtlMs } = batch;
    if (requests.length === 1 && requests[0]!.again === undefined) {
      const request = requests[0]!;
      sendSingle(this.#send, request.call).then((reply) => answer(request, reply), request.reject);
      return;
    }
    // One array of its final length, keys first, then the arguments. A request whose arguments are
    // an earlier one's (the same limits: the same array) refers back to it ('@<j>', j counting the
    // script's requests, an "again" one) instead of repeating them: most of a batch's arguments
    // otherwise, each read and copied on both sides. Its own ids (lease ids) follow either way.
    const firstUse = new Map<readonly string[], number>();
    let entries = 0;
    let length = batch.keyCount + 4;
    let repeats = false;
    for (let j = 0; j < requests.length; j++) {
      const { call, again } = requests[j]!;
      const { operation, args, ids } = call;
      entries++;
      if (firstUse.has(args)) length += 3;
      else {
        firstUse.set(args, entries);
        length += 3 + args.length;
      }
      if (ids !== undefined) length += ids.length;
      if (again !== undefined) {
        entries++;
        length += 2;
        // takes decide on what the request before left (a string state kept pending, a count of
        // slots followed); slots' riders send their own lease ids after the header
        if (operation === 'acquire') repeats = true;
        if (ids !== undefined) for (const rider of again) length += rider.call.ids!.length;
      }
    }
    const keysAndArgs: string[] = new Array(length);
    let k = 0;
    let a = batch.keyCount;
    // an acquire's "again" decides on its keys request after request: what they hold is kept pending
    keysAndArgs[a++] = repeats || keysRepeat(requests) ? 'batch-repeats' : 'batch';
    keysAndArgs[a++] = nowMs;
    keysAndArgs[a++] = minTtlMs;
    keysAndArgs[a++] = String(entries);
    let entry = 0;
    for (let j = 0; j < requests.length; j++) {
      const { call, again } = requests[j]!;
      const { operation, keys, args, ids } = call;
      entry++;
      for (let i = 0; i < keys.length; i++) keysAndArgs[k++] = keys[i]!;
      keysAndArgs[a++] = operation;
      keysAndArgs[a++] = String(keys.length);
      const first = firstUse.get(args)!;
      if (first !== entry) keysAndArgs[a++] = `@${first}`;
      else {
        keysAndArgs[a++] = String(args.length + (ids === undefined ? 0 : ids.length));
        for (let i = 0; i < args.length; i++) keysAndArgs[a++] = args[i]!;
      }
      if (ids !== undefined) for (let i = 0; i < ids.length; i++) keysAndArgs[a++] = ids[i]!;
      if (again !== undefined) {
        entry++;
        keysAndArgs[a++] = 'again';
        keysAndArgs[a++] = String(again.length);
        if (ids !== undefined) {
          for (const rider of again) {
            const riderIds = rider.call.ids!;
            for (let i = 0; i < riderIds.length; i++) keysAndArgs[a++] = riderIds[i]!;
          }
        }
      }
    }
    this.#send(batch.keyCount, keysAndArgs).then(
      (reply) => {
        if (!Array.isArray(reply) || reply.length !== entries) {
          const error = new StoreError(
            'STORE_ERROR',
            `unreadable limiter batch reply: ${JSON.stringify(reply)}`,
          );
          for (const request of requests) {
            request.reject(error);
            if (request.again !== undefined) for (const rider of request.again) rider.reject(error);
          }
          return;
        }
        let at = 0;
        for (let j = 0; j < requests.length; j++) {
          const request = requests[j]!;
          const one: unknown = reply[at++];
          if (one instanceof Error) request.reject(toStoreError(one));
          else answer(request, one);
          if (request.again === undefined) continue;
          const again: unknown = reply[at++];
          if (again instanceof Error) {
            const error = toStoreError(again);
            for (const rider of request.again) rider.reject(error);
          } else answerAgain(request.again, again);
        }
      },
      (error: StoreError) => {
        for (const request of requests) {
          request.reject(error);
          if (request.again !== undefined) for (const rider of request.again) rider.reject(error);
        }
      },
    );
  }
}
