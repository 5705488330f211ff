/**
 * One upstream request of a proxied HTTP exchange, on undici's `dispatch` with a handler of our own:
 * the upstream's status and header lines are read once (forwarding.ts) and written to the
 * client's response as one flat list, and its body chunks go to the client as undici hands them over,
 * with undici's socket paused while the client's side is full.
 *
 * Why not @fastify/reply-from: its path (a header object copied and rewritten, undici's `request()`
 * wrapping the body in a Readable, Fastify piping that stream into the response) cost more CPU per
 * request than the whole of the gateway's decision (`pnpm bench gateway`, docs/benchmarks.md). This
 * is what a reverse proxy needs of it, no more: no retries, no body rewriting, HTTP/1.1 upstreams.
 *
 * The exchange's upstream side (request-context.ts) is this call: a client that goes away aborts it,
 * and it is over when undici says so (its answer complete, it failed, or the abort completed).
 *
 * It keeps UPSTREAM_TIMEOUT_MS to the millisecond: undici checks its `headersTimeout` on a timer that
 * ticks every half second (lib/util/timers.js, for any delay of a second or more), so a 2 s timeout
 * fired at about 2.5 s. A native timer, armed once the request has been sent (its body read from the
 * client, as undici's own check waits for), aborts the call with undici's HeadersTimeoutError when no
 * response headers came in time: a 504. undici's own timeout stays as a backstop a second later.
 *
 * The response head is written with the first body chunk (or the end), not when the upstream's
 * headers arrive: an upstream whose body then stays silent past UPSTREAM_TIMEOUT_MS still gets the
 * client a 504, not a cut connection (as Fastify does for a streamed reply).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { type Dispatcher, errors, type Pool } from 'undici';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { refuseBodyTooLarge } from './answers.js';
import { errorBody, GatewayError } from './errors.js';
import {
  type ForwardingOptions,
  type OutgoingHeaders,
  responseLines,
  sanitizedLines,
  setForwardingHeaders,
  stripRequestHeaders,
} from './forwarding.js';
import type { RequestContext } from './request-context.js';
import { REQUEST_ID_HEADER } from './request-id.js';

/** How much later undici's own (coarse) headers timeout fires, as a backstop to ours, ms. */
export const BACKSTOP_MS = 1_000;

/** Error codes of a connection that never got a response: the upstream is unreachable (502). */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
]);
/** Error codes of an upstream that did not answer in time (504). */
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

function findStatus(error: unknown): number | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof GatewayError) return current.statusCode;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** What every call to one UPSTREAMS entry shares. */
export interface UpstreamTarget {
  /** how the entry is named in metrics and messages */
  name: string;
  pool: Pool;
  /** the Host the upstream is sent unless `preserveHost` */
  host: string;
  preserveHost: boolean;
  timeoutMs: number;
  bodyLimitBytes: number;
  forwarding: ForwardingOptions;
  /** its `sluice_upstream_errors_total` counters */
  errors: ReturnType<GatewayMetrics['upstreamErrorCounters']>;
}

/**
 * Whether a request still has a body to send. `complete` is not enough: a request is forwarded as
 * soon as it is admitted, possibly before Node has seen that no body follows. A GET's or HEAD's body
 * is never forwarded, so its end is no signal: it does not count.
 */
function hasBody(raw: IncomingMessage): boolean {
  if (raw.method === 'GET' || raw.method === 'HEAD') return false;
  const headers = raw.headers;
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0';
}

/** The request's headers as the upstream gets them. */
function upstreamHeaders(request: FastifyRequest, target: UpstreamTarget): OutgoingHeaders {
  const headers: OutgoingHeaders = { ...request.raw.headers };
  stripRequestHeaders(request, headers);
  headers.host = target.host;
  setForwardingHeaders(request, headers, target.forwarding, target.preserveHost);
  headers[REQUEST_ID_HEADER] = request.id;
  return headers;
}

/** Forwards an admitted request to `target`; the client gets the upstream's answer or the gateway's 502/504/413. */
export function forward(request: FastifyRequest, reply: FastifyReply, target: UpstreamTarget): void {
  const raw = request.raw;
  const method = raw.method ?? 'GET';
  // a body is forwarded only when it was parsed as one (upstreams.ts streams every body); GET and HEAD have none
  const body = (request.body as Readable | null | undefined) ?? null;
  const call = new UpstreamCall(request, reply, target);
  const options: Dispatcher.DispatchOptions = {
    method: method as Dispatcher.HttpMethod,
    path: raw.url ?? '/',
    headers: upstreamHeaders(request, target) as Dispatcher.DispatchOptions['headers'],
    body,
  };
  call.start();
  target.pool.dispatch(options, call as Dispatcher.DispatchHandler);
}

class UpstreamCall {
  readonly #request: FastifyRequest;
  readonly #reply: FastifyReply;
  readonly #response: ServerResponse;
  readonly #target: UpstreamTarget;
  readonly #context: RequestContext | null;
  /** undici's abort of this call, once it is on a connection */
  #abortCall: ((error?: Error) => void) | undefined = undefined;
  /** why the call was aborted before undici gave it a connection */
  #abortReason: Error | undefined = undefined;
  #timer: NodeJS.Timeout | undefined = undefined;
  /** while the request body is still on its way: arms the timer at its end */
  #armAtEnd: (() => void) | undefined = undefined;
  /** the upstream's status, once its headers came */
  #status = 0;
  #lines: string[] | undefined = undefined;
  #resume: (() => void) | undefined = undefined;
  #over = false;

  constructor(request: FastifyRequest, reply: FastifyReply, target: UpstreamTarget) {
    this.#request = request;
    this.#reply = reply;
    this.#response = reply.raw;
    this.#target = target;
    this.#context = request.sluice;
  }

  /** Ties the call to the client's side and starts the upstream's clock. */
  start(): void {
    const context = this.#context;
    // a held exchange's context aborts the call when the client goes away; any other is watched here
    if (context?.exchange !== undefined) context.upstreamStarted(this);
    // (`on`, not `once`: the response closes once, and a once-wrapper per request is not free)
    else
      this.#response.on('close', () => {
        if (!this.#over) this.abort();
      });
    const raw = this.#request.raw;
    // the upstream's time starts once the whole request is on its way (a slow upload is the client's
    // time); a body is read to its end only as it is forwarded
    if (raw.complete || !hasBody(raw)) this.#arm();
    else {
      this.#armAtEnd = () => {
        this.#armAtEnd = undefined;
        if (this.#status === 0 && !this.#over) this.#arm();
      };
      raw.once('end', this.#armAtEnd);
    }
  }

  /** Stops the call (the client went away, or the upstream took too long). */
  abort(reason: Error = new errors.RequestAbortedError()): void {
    if (this.#over) return;
    if (this.#abortCall !== undefined) this.#abortCall(reason);
    else this.#abortReason ??= reason;
  }

  #arm(): void {
    this.#timer = setTimeout(timedOut, this.#target.timeoutMs, this);
  }

  #stopClock(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#armAtEnd !== undefined) {
      this.#request.raw.off('end', this.#armAtEnd);
      this.#armAtEnd = undefined;
    }
  }

  // undici's handler (Dispatcher.DispatchHandler, the form its core calls without a wrapper)

  onConnect(abort: (error?: Error) => void): void {
    if (this.#abortReason !== undefined) abort(this.#abortReason);
    else this.#abortCall = abort;
  }

  onHeaders(status: number, headers: Buffer[], resume: () => void): boolean {
    // an interim answer (103 Early Hints): the final one follows
    if (status < 200) return true;
    this.#stopClock();
    // Node cannot write it; undici aborts the call with what this throws (a 502)
    if (status > 599) throw badAnswer(`the upstream answered status ${status}`);
    this.#status = status;
    this.#resume = resume;
    const context = this.#context;
    // first: it reads the upstream's charge header, which the exchange settles on when told the status
    this.#lines = responseLines(headers, context);
    const exchange = context?.exchange;
    if (exchange !== undefined) {
      // a HEAD has no body and a quicker answer: it must not buy the GET's answer below its admission cost
      if (this.#request.raw.method === 'HEAD') exchange.keepAdmissionCost();
      exchange.responded(status);
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (!this.#response.headersSent) {
      const refused = this.#writeHead();
      if (refused !== undefined) {
        this.abort(refused);
        return false;
      }
    }
    const exchange = this.#context?.exchange;
    if (exchange?.countsBytes) exchange.bytes += chunk.length;
    if (this.#response.write(chunk)) return true;
    this.#response.once('drain', this.#resume!);
    return false;
  }

  onComplete(): void {
    this.#over = true;
    const response = this.#response;
    // undici takes no abort once a call is complete: a head Node refuses is answered here
    const refused = response.headersSent ? undefined : this.#writeHead();
    if (refused === undefined) response.end();
    else this.#failed(refused);
    this.#context?.upstreamDone();
  }

  onError(error: Error): void {
    this.#over = true;
    this.#stopClock();
    try {
      this.#failed(error);
    } finally {
      this.#context?.upstreamDone();
    }
  }

  /**
   * The response head: the gateway's headers (request id, RateLimit) and the upstream's lines. An
   * error when Node refused a line the upstream sent even after it was cleaned (a 502 then).
   */
  #writeHead(): Error | undefined {
    const lines = this.#lines!;
    const own = this.#reply.getHeaders();
    // the upstream's own value wins over one of the gateway's (those the gateway must keep were taken out of `lines`)
    for (let i = 0; i < lines.length; i += 2) if (own[lines[i]!] !== undefined) delete own[lines[i]!];
    // a connection whose request body is still coming cannot carry another request
    if (!this.#request.raw.complete) own.connection = 'close';
    const upstreamLines = lines.length;
    try {
      this.#writeLines(own, lines);
    } catch {
      // the gateway's own lines were appended: only the upstream's are cleaned
      lines.length = upstreamLines;
      try {
        this.#writeLines(own, sanitizedLines(lines));
      } catch (error) {
        return badAnswer('the upstream sent a header line Node cannot write', error);
      }
    }
    return undefined;
  }

  #writeLines(own: Record<string, unknown>, lines: string[]): void {
    const response = this.#response;
    if (response.getHeaderNames().length === 0) {
      // the usual case: one flat list, which Node writes as it is (repeated lines kept)
      for (const name in own) {
        const value = own[name];
        if (Array.isArray(value)) for (const item of value) lines.push(name, String(item));
        else if (value !== undefined) lines.push(name, String(value));
      }
      response.writeHead(this.#status, lines);
      return;
    }
    // Node's response carries headers of its own already (the id of a request whose body was pending
    // at admission): given a list then, Node sets it one name at a time and keeps only the last of
    // repeated lines, so the upstream's lines are appended one by one instead
    for (const name in own) {
      const value = own[name];
      if (value !== undefined) response.setHeader(name, value as string | string[]);
    }
    for (let i = 0; i < lines.length; i += 2) response.appendHeader(lines[i]!, lines[i + 1]!);
    response.writeHead(this.#status);
  }

  #failed(error: Error): void {
    const reply = this.#reply;
    const response = this.#response;
    const context = this.#context;
    // the client went away and the gateway aborted the call: nobody to answer, nothing failed
    if (context?.clientDone || response.destroyed) return;
    if (response.headersSent) {
      // the answer has started: it can only be cut short
      reply.log.warn(
        { err: error, upstream: this.#target.name },
        'upstream response failed after it started',
      );
      response.destroy();
      return;
    }
    if (findStatus(error) === 413) {
      refuseBodyTooLarge(reply, this.#target.bodyLimitBytes);
      return;
    }
    const { name, timeoutMs } = this.#target;
    const exchange = context?.exchange;
    const codes = errorCodes(error);
    if (codes.some((c) => TIMEOUT_CODES.has(c))) {
      this.#target.errors.timeout.inc();
      exchange?.failed(504);
      const message =
        this.#status === 0
          ? `upstream ${name} did not answer within ${timeoutMs} ms`
          : `the upstream sent nothing within ${timeoutMs} ms`;
      reply.code(504).send(errorBody('SLUICE_UPSTREAM_TIMEOUT', message, { requestId: reply.request.id }));
      return;
    }
    const unreachable = codes.some((c) => UNREACHABLE_CODES.has(c));
    (unreachable ? this.#target.errors.unreachable : this.#target.errors.error).inc();
    exchange?.failed(502);
    reply.log.warn({ err: error, upstream: name }, 'upstream request failed');
    reply
      .code(502)
      .send(
        errorBody(
          'SLUICE_UPSTREAM_UNREACHABLE',
          unreachable ? `upstream ${name} is unreachable` : `upstream ${name} failed`,
          { requestId: reply.request.id },
        ),
      );
  }
}

/** An upstream answer the gateway cannot pass on (logged with the 502 it becomes). */
function badAnswer(message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, { cause }), { code: 'ERR_UPSTREAM_BAD_ANSWER' });
}

/** Aborts a call that has no response headers yet, as undici's own timeout would. */
function timedOut(call: UpstreamCall): void {
  call.abort(new errors.HeadersTimeoutError());
}
