/**
 * A real upstream on port 0: answers every request with a JSON echo of what it received (method,
 * url, headers, body size) and counts hits. `/slow/...` waits `?ms=` before answering; `/headers/...`
 * answers with extra response headers given as `?set=name:value` (to test hop-by-hop stripping), and
 * `?status=` sets the status code.
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
        const extra: Record<string, string> = {};
        for (const pair of url.searchParams.getAll('set')) {
          const colon = pair.indexOf(':');
          extra[pair.slice(0, colon)] = pair.slice(colon + 1);
        }
        const body = JSON.stringify(entry);
        res.writeHead(Number(url.searchParams.get('status') ?? 200), {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...extra,
        });
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
