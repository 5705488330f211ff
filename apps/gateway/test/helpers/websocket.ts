/**
 * WebSockets for tests: an echo upstream that counts the connections it holds (and remembers each
 * handshake's headers and each close code), and a client that opens one through the gateway and
 * reports either the open connection or the HTTP answer that refused it.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';

export interface EchoUpstream {
  url: string;
  /** handshakes that reached the upstream, in order */
  handshakes: { path: string; headers: IncomingHttpHeaders }[];
  /** connections open now, and the most at once of one client (by the X-Forwarded-For the gateway sent) */
  open(): number;
  mostOpen(forwardedFor: string): number;
  /** close codes the upstream received, in order */
  closeCodes: number[];
  /** the upstream's side of the open connection whose handshake asked for `path` */
  socketOf(path: string): WebSocket | undefined;
  close(): Promise<void>;
}

/**
 * Echoes every message back. `/refuse/...` answers the handshake 403 with a JSON body of its own;
 * `/hello/...` sends `hello <subprotocol>` first.
 */
export async function startEchoUpstream(): Promise<EchoUpstream> {
  const handshakes: EchoUpstream['handshakes'] = [];
  const closeCodes: number[] = [];
  const live = new Map<WebSocket, string>();
  const clientOf = new WeakMap<WebSocket, string>();
  const most = new Map<string, number>();
  const server = createServer((_req, res) => res.writeHead(200).end('plain http'));
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (offered) => [...offered][0] ?? false });
  server.on('upgrade', (req: IncomingMessage, socket, head) => {
    handshakes.push({ path: req.url ?? '', headers: req.headers });
    if (req.url?.startsWith('/refuse')) {
      const body = '{"upstream":"no"}';
      socket.end(
        `HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nx-upstream: yes\r\n\r\n${body}`,
      );
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      live.set(ws, req.url ?? '');
      clientOf.set(ws, String(req.headers['x-forwarded-for']));
      const client = String(req.headers['x-forwarded-for']);
      const ofClient = handshakesOpen(client);
      most.set(client, Math.max(most.get(client) ?? 0, ofClient));
      ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
      ws.on('close', (code) => {
        live.delete(ws);
        closeCodes.push(code);
      });
      if (req.url?.startsWith('/hello')) ws.send(`hello ${ws.protocol}`);
    });
  });
  function handshakesOpen(client: string): number {
    let open = 0;
    for (const ws of live.keys()) if (clientOf.get(ws) === client) open++;
    return open;
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    handshakes,
    open: () => live.size,
    mostOpen: (forwardedFor) => most.get(forwardedFor) ?? 0,
    closeCodes,
    socketOf: (path) => [...live].find(([, p]) => p === path)?.[0],
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of live.keys()) ws.terminate();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type Handshake =
  | { ok: true; ws: WebSocket; headers: IncomingHttpHeaders }
  | { ok: false; status: number; headers: IncomingHttpHeaders; body: string };

/** Opens `url` (ws://…); resolves with the open socket, or with the HTTP answer that refused it. */
export function openWebSocket(
  url: string,
  options: { headers?: Record<string, string>; protocols?: string[]; localAddress?: string } = {},
): Promise<Handshake> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, options.protocols ?? [], {
      headers: options.headers,
      localAddress: options.localAddress,
      handshakeTimeout: 5_000,
    });
    let headers: IncomingHttpHeaders = {};
    ws.once('upgrade', (response) => {
      headers = response.headers;
    });
    ws.once('open', () => resolve({ ok: true, ws, headers }));
    ws.once('unexpected-response', (_request, response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
      });
      response.on('end', () =>
        resolve({ ok: false, status: response.statusCode ?? 0, headers: response.headers, body }),
      );
    });
    ws.once('error', reject);
  });
}

/** The next message `ws` receives, as text. */
export function nextMessage(ws: WebSocket): Promise<string> {
  return new Promise((resolve) => ws.once('message', (data) => resolve(data.toString())));
}

/** Resolves with the close code once `ws` is closed. */
export function closed(ws: WebSocket): Promise<number> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve(-1);
  return new Promise((resolve) => ws.once('close', (code) => resolve(code)));
}
