/**
 * The channel without batching (`batching: false`): each request's script call is sent at once, as
 * its own call. With `coalesceWrites` the connection's writes are held until the end of the
 * event-loop turn, so that the calls of one turn leave in one write, each still its own EVALSHA.
 */
import type { Writable } from 'node:stream';
import { type ScriptCall, type ScriptChannel, type SendScript, sendSingle } from './script.js';

export class UnbatchedChannel implements ScriptChannel {
  readonly #send: SendScript;
  readonly #socketToCork: (() => Writable | undefined) | undefined;
  /** the socket is corked until the end of this event-loop turn */
  #corked = false;

  /** @param socketToCork the socket to hold until the turn ends; undefined: never hold writes */
  constructor(send: SendScript, socketToCork: (() => Writable | undefined) | undefined) {
    this.#send = send;
    this.#socketToCork = socketToCork;
  }

  call<T, C>(call: ScriptCall<T, C>): Promise<T> {
    if (this.#socketToCork !== undefined && !this.#corked) this.#corkUntilTurnEnds(this.#socketToCork());
    return sendSingle(this.#send, call as ScriptCall<unknown, unknown>).then((reply) =>
      call.decode(reply, call.context),
    );
  }

  flush(): void {}

  #corkUntilTurnEnds(socket: Writable | undefined): void {
    if (socket === undefined) return;
    this.#corked = true;
    socket.cork();
    setImmediate(() => {
      this.#corked = false;
      socket.uncork();
    });
  }
}
