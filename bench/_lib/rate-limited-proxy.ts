// The yardstick the issue names: @fastify/http-proxy behind the plain @fastify/rate-limit plugin on
// Redis (its fixed window: one script of INCR, PTTL and PEXPIRE per request, no batching), with a
// limit no bench request reaches, keyed by client IP like the gateway's bench rule.
import proxy from '@fastify/http-proxy';
import rateLimit from '@fastify/rate-limit';
import Fastify from 'fastify';
import { Redis } from 'ioredis';

const upstream = process.env.UPSTREAM_URL;
const redisUrl = process.env.REDIS_URL;
if (!upstream || !redisUrl) throw new Error('UPSTREAM_URL and REDIS_URL are required');
const redis = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
const app = Fastify({ logger: false });
await app.register(rateLimit, { max: 1e12, timeWindow: 60_000, redis, nameSpace: 'bench-rl:' });
await app.register(proxy, { upstream, prefix: '/', http2: false });
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' });
process.stdout.write(`LISTENING ${new URL(address).port}\n`);
process.on('SIGTERM', () => {
  app.close().then(() => {
    redis.disconnect();
    process.exit(0);
  });
});
