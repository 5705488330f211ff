/**
 * Entry of the demo upstream (`node dist/upstream.js`): `PORT` (default 3000), `HOST` (default
 * 0.0.0.0), `UPSTREAM_NAME` (default demo-upstream). Stops on SIGTERM/SIGINT after open requests end.
 */
import { createUpstreamServer } from './upstream-server.js';

const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST || '0.0.0.0';
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`PORT must be an integer from 0 to 65535, got ${JSON.stringify(process.env.PORT)}`);
  process.exit(1);
}

const server = createUpstreamServer(process.env.UPSTREAM_NAME || 'demo-upstream');
server.listen(port, host, () => {
  const address = server.address();
  const actual = typeof address === 'object' && address ? address.port : port;
  console.log(
    JSON.stringify({ level: 30, time: Date.now(), msg: `demo upstream listening on ${host}:${actual}` }),
  );
});

function stop(): void {
  server.close(() => process.exit(0));
  server.closeIdleConnections();
  // keep-alive clients that never go idle must not hold the process for ever
  setTimeout(() => process.exit(0), 5_000).unref();
}
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
