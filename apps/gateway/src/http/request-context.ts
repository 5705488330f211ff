/**
 * The one per-request context of the proxy listener (`request.sluice`): created by the admission
 * hook once a request is one the gateway will decide, read by every later step (the limit hook turns
 * it into facts for the decision core, the proxy into headers and settlements), and holding the
 * exchange handle the decision opened. Nothing about a request lives anywhere else.
 *
 * It also says when an admitted exchange is over for the limiter (docs/lifecycle.md): when the
 * client's side has closed (the response sent, or the client gone) AND the upstream's side is done
 * (its answer over, or its request aborted; a WebSocket closed). A client that goes away does not
 * end the exchange for the upstream: the gateway aborts the upstream request and keeps the slot
 * until that abort has completed, so aborting clients never put more than `max` at the upstream.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Exchange, RequestFacts, VerifiedClaims } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';
import type { TransportRequest } from './transport-request.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** the gateway's context of this request; null until admitted (refused requests have none) */
    sluice: RequestContext | null;
  }
}

export class RequestContext implements RequestFacts {
  /**
   * a rule with limits applied: the client gets the gateway's RateLimit headers, never the
   * upstream's own (they are stripped from the response)
   */
  limited = false;
  /**
   * the rule that applied is a shadow rule: the client gets no RateLimit headers of the gateway's, and
   * the upstream's own pass as if no rule applied (a dry run changes nothing a client can see)
   */
  shadow = false;
  /** the admitted request's settle handle (its rule settles slots, a charge or a refund) */
  exchange: Exchange | undefined = undefined;
  /** the claims of its bearer token once the identity hook verified it (identity-hook.ts) */
  verified: VerifiedClaims | undefined = undefined;
  /** the client's side is over: its response was sent, or the client went away */
  #clientDone = false;
  /** what stops the upstream request (or WebSocket) of a held exchange while it runs */
  #upstream: { abort(): void } | undefined = undefined;
  /** the upstream's answer while it streams */
  #upstreamBody: Readable | undefined = undefined;

  constructor(
    /** the request as its transport gave it (transport-request.ts) */
    readonly transport: TransportRequest,
    readonly method: string,
    /** normalised; undefined when the request names no host */
    readonly host: string | undefined,
    /** normalised, canonical form: what routing, matching and the upstream see */
    readonly path: string,
    /** the client IP as TRUST_PROXY decides it */
    readonly clientAddress: string | undefined,
  ) {}

  header(lowercaseName: string): readonly string[] | undefined {
    return this.transport.headerLines(lowercaseName);
  }

  joinedHeader(lowercaseName: string): string | undefined {
    const value = this.transport.headers[lowercaseName];
    // an array only for set-cookie, never a request header that keys a client
    return typeof value === 'string' ? value : value?.[0];
  }

  clientIp(): string | undefined {
    return this.clientAddress;
  }

  claims(): VerifiedClaims | undefined {
    return this.verified;
  }

  /** The exchange ends once the client's side (`response` closes) and the upstream's side are over. */
  hold(exchange: Exchange, response: ServerResponse): void {
    this.exchange = exchange;
    // the client may have gone while the store decided: 'close' has been emitted already
    if (response.closed) this.#clientClosed(response);
    else response.once('close', () => this.#clientClosed(response));
  }

  /** true once the client's side is over (the response sent, or the client gone) */
  get clientDone(): boolean {
    return this.#clientDone;
  }

  /** The upstream side of a held exchange starts, stopped by `upstream.abort()` (at once if the client is gone). */
  upstreamStarted(upstream: { abort(): void } = new AbortController()): void {
    this.#upstream = upstream;
    if (this.#clientDone) upstream.abort();
  }

  /** The upstream answers: its side is over when this body ends or is destroyed. */
  upstreamAnswering(body: Readable): void {
    this.#upstreamBody = body;
    body.once('close', () => this.upstreamDone());
    // nobody will read it: end the upstream's side now
    if (this.#clientDone) body.destroy();
  }

  /** The upstream side is over (its answer ended, it failed, or its abort completed). */
  upstreamDone(): void {
    this.#upstream = undefined;
    this.#upstreamBody = undefined;
    if (this.#clientDone) this.exchange?.end();
  }

  #clientClosed(response: ServerResponse): void {
    this.#clientDone = true;
    // the client left before the whole response was sent: what it did not take cannot lower its
    // charge (else hanging up after the headers would make a byte-charged request nearly free)
    if (!response.writableFinished) this.exchange?.keepAdmissionCost();
    const upstream = this.#upstream;
    if (upstream === undefined) {
      this.exchange?.end();
      return;
    }
    // the upstream works for nobody now: stop it, and end the exchange when it has stopped
    upstream.abort();
    this.#upstreamBody?.destroy();
  }
}

/** Declares `request.sluice` (null until the admission hook sets it). */
export function registerRequestContext(app: FastifyInstance): void {
  if (!app.hasRequestDecorator('sluice')) app.decorateRequest('sluice', null);
}
