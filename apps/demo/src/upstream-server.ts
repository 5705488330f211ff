/**
 * The demo upstream: answers every request with JSON describing what it received, so a user can see
 * what the gateway forwarded (normalised path, headers), with what the gateway told it about the
 * client (`forwarded`) and the request id (`requestId`) pulled out. It reads and counts request
 * bodies but keeps none of them.
 *
 * Three query parameters let a user try a request's whole life (docs/lifecycle.md) without writing an
 * upstream: `?ms=` answers after that many ms (at most 60 s), `?status=` answers with that status
 * (200–599), `?cost=` prices the request in the `x-sluice-cost` response
 * header (what a rule's `charge: { from: header, header: x-sluice-cost }` reads).
 *
 * Two long-lived endpoints show streams and WebSockets through the gateway: `/events` sends
 * server-sent events (`?n=` of them, default 5, one every `?everyMs=`, default 1000), and a WebSocket
 * to `/ws` is greeted with what the upstream was told, then echoes every message.
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { WebSocketServer } from 'ws';

/** What the gateway told the upstream about the client (docs/gateway.md, "What the upstream is told"). */
export interface ForwardedInfo {
  for?: string;
  proto?: string;
  host?: string;
  port?: string;
  /** RFC 7239 `Forwarded` (FORWARDED_HEADERS=forwarded or both) */
  forwarded?: string;
}

export interface UpstreamReply {
  upstream: string;
  method: string;
  /** path and query string exactly as the gateway forwarded them */
  path: string;
  /** the request's X-Request-Id: the same id the client got back, and the gateway logged */
  requestId?: string;
  forwarded: ForwardedInfo;
  headers: Record<string, string | string[] | undefined>;
  bodyBytes: number;
  receivedAt: string;
}

/** The greeting a WebSocket to `/ws` gets first. */
export interface WebSocketGreeting {
  upstream: string;
  path: string;
  requestId?: string;
  forwarded: ForwardedInfo;
}

/** Most server-sent events one `/events` request asks for, and the shortest gap between two, ms. */
const MAX_EVENTS = 1_000;
const MIN_EVENT_GAP_MS = 10;

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function forwardedInfo(headers: IncomingHttpHeaders): ForwardedInfo {
  const info: ForwardedInfo = {
    for: first(headers['x-forwarded-for']),
    proto: first(headers['x-forwarded-proto']),
    host: first(headers['x-forwarded-host']),
    port: first(headers['x-forwarded-port']),
    forwarded: first(headers.forwarded),
  };
  for (const key of Object.keys(info) as (keyof ForwardedInfo)[])
    if (info[key] === undefined) delete info[key];
  return info;
}

export function createUpstreamServer(name = 'demo-upstream'): Server {
  const server = createServer((req, res) => {
    let bodyBytes = 0;
    req.on('data', (chunk: Buffer) => {
      bodyBytes += chunk.length;
    });
    req.on('end', () => {
      if (req.url === '/healthz') {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
        return;
      }
      const url = new URL(req.url ?? '/', 'http://upstream');
      if (url.pathname === '/events') {
        sendEvents(req, res, name, url.searchParams);
        return;
      }
      const query = url.searchParams;
      const delayMs = Math.min(Math.max(Number(query.get('ms')) || 0, 0), 60_000);
      const asked = Number(query.get('status'));
      const status = Number.isInteger(asked) && asked >= 200 && asked <= 599 ? asked : 200;
      const cost = query.get('cost');
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (cost !== null) headers['x-sluice-cost'] = cost;
      const reply: UpstreamReply = {
        upstream: name,
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        requestId: first(req.headers['x-request-id']),
        forwarded: forwardedInfo(req.headers),
        headers: req.headers,
        bodyBytes,
        receivedAt: new Date().toISOString(),
      };
      const answer = () => res.writeHead(status, headers).end(`${JSON.stringify(reply, null, 2)}\n`);
      if (delayMs > 0) setTimeout(answer, delayMs);
      else answer();
    });
  });
  const webSockets = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req: IncomingMessage, socket, head) => {
    if (new URL(req.url ?? '/', 'http://upstream').pathname !== '/ws') {
      socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      return;
    }
    webSockets.handleUpgrade(req, socket, head, (ws) => {
      const greeting: WebSocketGreeting = {
        upstream: name,
        path: req.url ?? '/ws',
        requestId: first(req.headers['x-request-id']),
        forwarded: forwardedInfo(req.headers),
      };
      ws.send(JSON.stringify(greeting));
      ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
    });
  });
  return server;
}

/** `/events`: `n` server-sent events, one every `everyMs`, each naming the request; then the stream ends. */
function sendEvents(req: IncomingMessage, res: ServerResponse, name: string, query: URLSearchParams): void {
  const count = Math.min(Math.max(Math.floor(Number(query.get('n') ?? 5)) || 5, 1), MAX_EVENTS);
  const everyMs = Math.max(Number(query.get('everyMs') ?? 1000) || 1000, MIN_EVENT_GAP_MS);
  const requestId = first(req.headers['x-request-id']);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let sent = 0;
  const timer = setInterval(() => {
    sent++;
    res.write(
      `id: ${sent}\ndata: ${JSON.stringify({ upstream: name, event: sent, of: count, requestId })}\n\n`,
    );
    if (sent === count) {
      clearInterval(timer);
      res.end();
    }
  }, everyMs);
  res.on('close', () => clearInterval(timer));
}
