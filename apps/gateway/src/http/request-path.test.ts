/**
 * How many of the repository's source files one request crosses (issue 39): a limited request on
 * its way to its 429, and an admitted one on its way to its proxied answer. Measured with V8's
 * precise coverage, whose counters are reset just before the request and read just after it, so
 * only what ran for that request is counted. The lists are printed in the order the gateway
 * crosses them (docs/gateway.md, "A request's path"), to keep that section honest.
 */

import { createServer, type Server } from 'node:http';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { StaticRules } from '@sluice/engine';
import { MemoryStore, storedRule } from '@sluice/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGateway, type Gateway } from '../app.js';
import { loadConfig } from '../config/config.js';

/**
 * Most files each path may cross: the counts measured once the HTTP/1.1 internals moved into
 * node-http1.ts (from 30 and 34), so a change that lengthens a path fails here. Issue 39 asks for
 * 20; most of what is left is the limiter's algorithm modules (packages/shared/src/limiter).
 */
const MOST_FILES_TO_429 = 28;
const MOST_FILES_TO_PROXIED = 30;
const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));

let upstream: Server;
let gateway: Gateway;
let proxyUrl: string;
const session = new Session();

beforeAll(async () => {
  upstream = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const config = loadConfig({
    PORT: '0',
    ADMIN_PORT: '0',
    HOST: '127.0.0.1',
    UPSTREAMS: `/=http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    RULES_API_URL: 'http://127.0.0.1:9',
    LOG_LEVEL: 'silent',
  });
  const rules = new StaticRules([
    storedRule({ name: 'tight', match: { path: '/tight' }, limit: { capacity: 1, refill: 1, period: '1h' } }),
    storedRule({
      name: 'roomy',
      match: { path: '/roomy' },
      limit: { capacity: 1000, refill: 1000, period: '1m' },
    }),
  ]);
  gateway = buildGateway(config, { rules, store: new MemoryStore(), defaultMetrics: false, heartbeatMs: 0 });
  ({ proxyUrl } = await gateway.start());
  await gateway.ready();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
});

afterAll(async () => {
  await session.post('Profiler.stopPreciseCoverage').catch(() => {});
  session.disconnect();
  await gateway?.close();
  await new Promise((resolve) => upstream.close(resolve));
});

/** The repository's non-test source files that ran code while `send` ran, in the order they first ran. */
async function filesCrossedBy(send: () => Promise<void>): Promise<string[]> {
  await session.post('Profiler.takePreciseCoverage'); // resets the counters
  await send();
  // the settlement of an exchange follows its answer by a tick
  await new Promise((resolve) => setTimeout(resolve, 20));
  const { result } = await session.post('Profiler.takePreciseCoverage');
  const files: string[] = [];
  for (const script of result) {
    const path = script.url.startsWith('file://') ? fileURLToPath(script.url) : script.url;
    if (!path.startsWith(repoRoot)) continue;
    const file = path.slice(repoRoot.length);
    if (
      !/^(apps|packages)\/.+\.ts$/.test(file) ||
      file.includes('node_modules/') ||
      /\.test\.ts$/.test(file)
    ) {
      continue;
    }
    if (file.startsWith('packages/test-support/') || file.includes('/test/')) continue;
    if (script.functions.some((fn) => fn.ranges.some((range) => range.count > 0))) files.push(file);
  }
  return files;
}

describe("a request's path", () => {
  it(`a limited request reaches its 429 through at most ${MOST_FILES_TO_429} files`, async () => {
    // warm-up: every module has run once, and the bucket is empty
    expect((await fetch(`${proxyUrl}/tight`)).status).toBe(200);
    expect((await fetch(`${proxyUrl}/tight`)).status).toBe(429);
    let status = 0;
    const files = await filesCrossedBy(async () => {
      const response = await fetch(`${proxyUrl}/tight`);
      status = response.status;
      await response.text();
    });
    expect(status).toBe(429);
    console.log(`429 path, ${files.length} files:\n  ${files.join('\n  ')}`);
    expect(files.length, files.join('\n')).toBeLessThanOrEqual(MOST_FILES_TO_429);
  });

  it(`an admitted request reaches its proxied answer through at most ${MOST_FILES_TO_PROXIED} files`, async () => {
    for (let i = 0; i < 3; i++) expect((await fetch(`${proxyUrl}/roomy`)).status).toBe(200);
    let body = '';
    const files = await filesCrossedBy(async () => {
      body = await (await fetch(`${proxyUrl}/roomy`)).text();
    });
    expect(body).toBe('ok');
    console.log(`proxied path, ${files.length} files:\n  ${files.join('\n  ')}`);
    expect(files.length, files.join('\n')).toBeLessThanOrEqual(MOST_FILES_TO_PROXIED);
  });
});
