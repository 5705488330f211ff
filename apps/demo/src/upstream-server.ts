/**
 * The demo upstream: answers every request with JSON describing what it received, so a user can see
 * what the gateway forwarded (normalised path, forwarding headers). It reads and counts request bodies
 * but keeps none of them.
 *
 * Three query parameters let a user try a request's whole life (docs/lifecycle.md) without writing an
 * upstream: `?ms=` answers after that many ms (at most 60 s), `?status=` answers with that status
 * (200–599), `?cost=` prices the request in the `x-sluice-cost` response
 * header (what a rule's `charge: { from: header, header: x-sluice-cost }` reads).
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
      const query = new URL(req.url ?? '/', 'http://upstream').searchParams;
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
        headers: req.headers,
        bodyBytes,
        receivedAt: new Date().toISOString(),
      };
      const answer = () => res.writeHead(status, headers).end(`${JSON.stringify(reply, null, 2)}\n`);
      if (delayMs > 0) setTimeout(answer, delayMs);
      else answer();
    });
  });
}
