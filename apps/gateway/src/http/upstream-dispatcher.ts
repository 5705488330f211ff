/**
 * The undici agent of one UPSTREAMS entry, as @fastify/reply-from calls it (`request(options,
 * callback)`): a held exchange's upstream request is bound to its context (request-context.ts), so
 * that a client going away aborts the upstream request, and the exchange (its concurrency slot) ends
 * only once that request is over: its answer ended, it failed, or the abort completed.
 *
 * reply-from gives a dispatcher no request object, only the outgoing options. The route's
 * `rewriteRequestHeaders` (upstreams.ts) runs synchronously just before reply-from calls `request`,
 * so it hands the request over with `bind`; `request` takes it only when the options carry that
 * request's own X-Request-Id, so a hand-over can never reach another request.
 */

import type { FastifyRequest } from 'fastify';
import { Agent, type Dispatcher } from 'undici';
import { REQUEST_ID_HEADER } from './request-id.js';

type Callback = (error: Error | null, data: Dispatcher.ResponseData) => void;

export class UpstreamDispatcher {
  readonly #agent: Agent;
  #next: FastifyRequest | undefined;

  constructor(options: Agent.Options) {
    this.#agent = new Agent(options);
  }

  /** The request whose upstream call reply-from is about to make. */
  bind(request: FastifyRequest): void {
    this.#next = request;
  }

  request(options: Dispatcher.RequestOptions, callback: Callback): void {
    const request = this.#next;
    this.#next = undefined;
    const context = request?.sluice;
    if (
      context?.exchange === undefined ||
      (options.headers as Record<string, unknown> | undefined)?.[REQUEST_ID_HEADER] !== request!.id
    ) {
      this.#agent.request(options, callback);
      return;
    }
    const signal = context.upstreamStarted();
    this.#agent.request({ ...options, signal }, (error, data) => {
      // reply-from first (it reports a 502/504 to the exchange), then the end of the upstream side
      callback(error, data);
      if (error) context.upstreamDone();
      else context.upstreamAnswering(data.body);
    });
  }

  /** Closes every connection (the gateway has stopped: nothing is in flight any more). */
  destroy(): Promise<void> {
    return this.#agent.destroy();
  }
}
