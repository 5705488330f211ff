/**
 * A real upstream on port 0: answers every request with a JSON echo of what it received (method,
 * url, headers, body size) and counts hits. `/slow/...` waits `?ms=` before answering; `/headers/...`
 * answers with extra response headers given as `?set=name:value` (to test hop-by-hop stripping; a
 * name given twice is two header lines), `?status=` sets the status code, and `?hint=<link>` sends a
 * 103 Early Hints with that Link first.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  bodyBytes: number;
}

export interface Upstream {
  url: string;
  port: number;
  /** requests received, in order */
  received: ReceivedRequest[];
  hits(pathPrefix?: string): number;
  close(): Promise<void>;
}

export async function startUpstream(): Promise<Upstream> {
  const received: ReceivedRequest[] = [];
  const server: Server = createServer((req, res) => {
    let bodyBytes = 0;
    req.on('data', (chunk: Buffer) => {
      bodyBytes += chunk.length;
    });
    req.on('end', () => {
      const entry = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, bodyBytes };
      received.push(entry);
      const url = new URL(req.url ?? '/', 'http://upstream');
      const answer = () => {
        const body = JSON.stringify(entry);
        const lines = ['content-type', 'application/json', 'content-length', String(Buffer.byteLength(body))];
        for (const pair of url.searchParams.getAll('set')) {
          const colon = pair.indexOf(':');
          lines.push(pair.slice(0, colon), pair.slice(colon + 1));
        }
        const hint = url.searchParams.get('hint');
        if (hint !== null) res.writeEarlyHints({ link: hint });
        res.writeHead(Number(url.searchParams.get('status') ?? 200), lines);
        res.end(body);
      };
      if (url.pathname === '/slow' || url.pathname.startsWith('/slow/'))
        setTimeout(answer, Number(url.searchParams.get('ms') ?? 1000));
      else answer();
    });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    hits: (pathPrefix) =>
      pathPrefix === undefined
        ? received.length
        : received.filter((r) => r.url.startsWith(pathPrefix)).length,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
