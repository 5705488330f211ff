/**
 * The one per-request context of the proxy listener (`request.sluice`): created by the admission
 * hook once a request is one the gateway will decide, read by every later step (the limit hook turns
 * it into facts for the decision core, the proxy into headers and settlements), and holding the
 * exchange handle the decision opened. Nothing about a request lives anywhere else.
 */
import type { IncomingMessage } from 'node:http';
import type { Exchange, RequestFacts } from '@sluice/shared';
import type { FastifyInstance } from 'fastify';

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
  /** the admitted request's settle handle (its rule settles slots, a charge or a refund) */
  exchange: Exchange | undefined = undefined;

  constructor(
    readonly raw: IncomingMessage,
    readonly method: string,
    /** normalised; undefined when the request names no host */
    readonly host: string | undefined,
    /** normalised, canonical form: what routing, matching and the upstream see */
    readonly path: string,
    /** the client IP as TRUST_PROXY decides it */
    readonly clientAddress: string | undefined,
  ) {}

  header(lowercaseName: string): readonly string[] | undefined {
    return this.raw.headersDistinct[lowercaseName];
  }

  joinedHeader(lowercaseName: string): string | undefined {
    const value = this.raw.headers[lowercaseName];
    // an array only for set-cookie, never a request header that keys a client
    return typeof value === 'string' ? value : value?.[0];
  }

  clientIp(): string | undefined {
    return this.clientAddress;
  }
}

/** Declares `request.sluice` (null until the admission hook sets it). */
export function registerRequestContext(app: FastifyInstance): void {
  if (!app.hasRequestDecorator('sluice')) app.decorateRequest('sluice', null);
}
