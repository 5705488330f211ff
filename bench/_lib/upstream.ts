// The benchmark upstream: answers every request with a small fixed JSON body, as fast as Node can.
import { createServer } from 'node:http';

const body = Buffer.from(JSON.stringify({ ok: true, service: 'bench-upstream', padding: 'x'.repeat(64) }));
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
    res.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const addr = server.address();
  process.stdout.write(`LISTENING ${typeof addr === 'object' && addr ? addr.port : ''}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
