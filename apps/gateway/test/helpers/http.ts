/** Plain HTTP/1.1 clients for tests: node:http (paths sent as written) and a raw socket. */
import { type Agent, type IncomingHttpHeaders, request } from 'node:http';
import { connect } from 'node:net';

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  json<T = Record<string, unknown>>(): T;
}

export interface HttpOptions {
  method?: string;
  headers?: Record<string, string | string[]>;
  body?: string | Buffer;
  /** source address of the connection (any 127.x.y.z works on Linux) */
  localAddress?: string;
  agent?: Agent | false;
  timeoutMs?: number;
}

/** Sends one request with `path` exactly as written (no URL normalisation, unlike fetch). */
export function http(port: number, path: string, options: HttpOptions = {}): Promise<HttpResponse> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: options.method ?? 'GET',
        headers: options.headers,
        localAddress: options.localAddress,
        agent: options.agent ?? false,
        timeout: options.timeoutMs ?? 15_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json: () => JSON.parse(body) });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`request to ${path} timed out`)));
    req.on('error', reject);
    req.end(options.body);
  });
}

export interface RawResponse {
  status: number;
  /** the whole response text as received */
  text: string;
  /** whether the server closed the connection */
  closed: boolean;
}

/**
 * Writes `raw` (a hand-made request, CRLFs included) on a fresh socket and returns the first
 * response's status line, once the server closes or `waitMs` passes after the first bytes.
 */
export function rawHttp(port: number, raw: string | Buffer, waitMs = 300): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let text = '';
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({ status: match ? Number(match[1]) : 0, text, closed });
    };
    socket.on('connect', () => socket.write(raw));
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      clearTimeout(timer);
      timer = setTimeout(() => finish(false), waitMs);
    });
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', (error) => {
      if (text) finish(true);
      else if (!settled) {
        settled = true;
        reject(error);
      }
    });
    setTimeout(() => finish(false), 10_000).unref();
  });
}
