/**
 * `GET /console`: the admin console (docs/console.md). Three static files, read once at start and
 * served without auth; the page itself asks for a token and calls the public REST API with it.
 * The Content-Security-Policy allows only these files and calls to this origin: no inline script or
 * style, no other origin, no framing.
 */
import { readFile } from 'node:fs/promises';
import type { FastifyPluginAsync } from 'fastify';

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const ASSETS = new URL('./assets/', import.meta.url);

const FILES = [
  { url: '/console', file: 'index.html', type: 'text/html; charset=utf-8' },
  { url: '/console/app.js', file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { url: '/console/style.css', file: 'style.css', type: 'text/css; charset=utf-8' },
] as const;

export const consoleRoutes: FastifyPluginAsync = async (app) => {
  for (const { url, file, type } of FILES) {
    const body = await readFile(new URL(file, ASSETS));
    app.get(url, { schema: { hide: true } }, async (_request, reply) =>
      reply
        .header('content-type', type)
        .header('content-security-policy', CONSOLE_CSP)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        // small files; revalidating keeps a deployed fix visible at once
        .header('cache-control', 'no-cache')
        .send(body),
    );
  }
};
