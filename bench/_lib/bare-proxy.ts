// The baseline: a bare @fastify/http-proxy in front of the same upstream, no rate limiting.
import proxy from '@fastify/http-proxy';
import Fastify from 'fastify';

const upstream = process.env.UPSTREAM_URL;
if (!upstream) throw new Error('UPSTREAM_URL is required');
const app = Fastify({ logger: false });
await app.register(proxy, { upstream, prefix: '/', http2: false });
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' });
process.stdout.write(`LISTENING ${new URL(address).port}\n`);
process.on('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
