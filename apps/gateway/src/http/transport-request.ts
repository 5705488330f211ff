/**
 * What the gateway needs of a request, whatever carried it: an HTTP/1.1 request (node-http1.ts), an
 * HTTP/2 stream or a gRPC call can each produce one. The request context (request-context.ts), the
 * admission hook and the decision read only this, so a new front door is one new adapter.
 */
import type { GatewayErrorCode } from './errors.js';

/** Why a request is refused from its head alone (its target, its Host, its request line), as a value. */
export interface HeadRefusal {
  readonly code: GatewayErrorCode;
  readonly message: string;
  /** the finer reason (`PATH_DOT_SEGMENT`, `HOST_DUPLICATE`…): the answer's `reason` and the metric's label */
  readonly reason?: string;
}

export interface TransportRequest {
  readonly method: string;
  /** the host the request names, normalised (lower case, no port, no trailing dot); undefined when none */
  readonly authority: string | undefined;
  /** the request-target as received */
  readonly path: string;
  /** lower-case name → value; repeated lines joined (set-cookie: one entry per line) */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** every line of one header, in order; undefined when the request has none */
  headerLines(lowercaseName: string): readonly string[] | undefined;
  /** the socket peer (a proxy TRUST_PROXY trusts, or the client itself) */
  readonly peer: { readonly address: string | undefined; readonly port: number | undefined };
  /** true when the request came over TLS */
  readonly tls: boolean;
  /** set when the gateway refuses the request from its head alone; the admission hook answers it */
  readonly refusal: HeadRefusal | undefined;
  /** asks for a WebSocket (RFC 6455 §4.2.1) */
  readonly webSocket: boolean;
}
