/**
 * The demo upstream: answers every request with JSON describing what it received, so a user can see
 * what the gateway forwarded (normalised path, forwarding headers). It reads and counts request bodies
 * but keeps none of them.
 */
import { createServer, type Server } from 'node:http';

export interface UpstreamReply {
  upstream: string;
  method: string;
  /** path and query string exactly as the gateway forwarded them */
  path: string;
  headers: Record<string, string | string[] | undefined>;
  bodyBytes: number;
  receivedAt: string;
}

export function createUpstreamServer(name = 'demo-upstream'): Server {
  return createServer((req, res) => {
    let bodyBytes = 0;
    req.on('data', (chunk: Buffer) => {
      bodyBytes += chunk.length;
    });
    req.on('end', () => {
      if (req.url === '/healthz') {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
        return;
      }
      const reply: UpstreamReply = {
        upstream: name,
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        headers: req.headers,
        bodyBytes,
        receivedAt: new Date().toISOString(),
      };
      res.writeHead(200, { 'content-type': 'application/json' }).end(`${JSON.stringify(reply, null, 2)}\n`);
    });
  });
}
