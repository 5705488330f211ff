/**
 * No credential in clear (docs/rules.md, "Secret client keys"): a client sends a known `x-api-key`
 * through a real gateway (its own process, from source, logging at debug) backed by real Redis, reading
 * its rules from a real rules API (its own process and Postgres database, also at debug, asking the
 * gateway for top offenders with GATEWAY_ADMIN_TOKEN). Then every place Sluice stores or shows a
 * client is searched for the raw value: every Redis key and value under the deployment's prefix, the
 * gateway's `/usage` (looked up by the raw value) and `/offenders`, the rules API's offenders and
 * explain, the console's page after Chromium rendered it, and both processes' logs.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { freePort, REPO_ROOT, startRulesApi, type TestRulesApi, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const REDIS_URL = 'redis://127.0.0.1:6379';
const PREFIX = `sluice-test:no-clear:${randomBytes(4).toString('hex')}:`;
const CLIENT_KEY_SECRET = 'no-clear-test-secret';
const GATEWAY_ADMIN_TOKEN = `gw-admin-${randomBytes(8).toString('hex')}`;
/** the customer's secret: must never be seen again */
const RAW = `sk_live_${randomBytes(12).toString('hex')}`;

let api: TestRulesApi;
let gateway: ChildProcess;
const gatewayOutput: string[] = [];
let proxyUrl: string;
let adminUrl: string;
let upstream: ReturnType<typeof import('node:http').createServer>;
let ruleId: string;
let redis: Redis;
let browser: Browser;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  const { createServer } = await import('node:http');
  upstream = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamPort = (upstream.address() as { port: number }).port;
  const [port, adminPort] = [await freePort(), await freePort()];
  proxyUrl = `http://127.0.0.1:${port}`;
  adminUrl = `http://127.0.0.1:${adminPort}`;

  api = await startRulesApi({
    databasePrefix: 'sluice_no_clear',
    env: {
      LOG_LEVEL: 'debug',
      CLIENT_KEY_SECRET,
      GATEWAY_ADMIN_TOKEN,
      // offenders come from the gateway's admin port: only with the token
      ANALYTICS_GATEWAYS: adminUrl,
      REDIS_KEY_PREFIX: PREFIX,
    },
  });
  const created = await fetch(`${api.url}/rules`, {
    method: 'POST',
    headers: { authorization: `Bearer ${api.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'keys',
      match: { path: '/keys/**' },
      client: { by: 'header', name: 'x-api-key' },
      limit: { capacity: 2, refill: 1, period: '1h' },
    }),
  });
  expect(created.status).toBe(201);
  ruleId = ((await created.json()) as { id: string }).id;

  gateway = spawn(process.execPath, ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'], {
    cwd: `${REPO_ROOT}apps/gateway`,
    env: {
      PATH: process.env.PATH ?? '',
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'debug',
      UPSTREAMS: `/=http://127.0.0.1:${upstreamPort}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: api.readToken,
      RULES_REFRESH: '* * * * * *',
      REDIS_URL,
      REDIS_KEY_PREFIX: PREFIX,
      STORE_FAILURE: 'closed',
      STORE_TIMEOUT_MS: '2000',
      CLIENT_KEY_SECRET,
      GATEWAY_ADMIN_TOKEN,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  gateway.stdout!.on('data', (d: Buffer) => gatewayOutput.push(d.toString()));
  gateway.stderr!.on('data', (d: Buffer) => gatewayOutput.push(d.toString()));
  await waitFor(
    async () => (await fetch(`${adminUrl}/readyz`).catch(() => undefined))?.status === 200,
    30_000,
    'the gateway',
  );
  redis = new Redis(REDIS_URL);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
}, 90_000);

afterAll(async () => {
  await browser?.close();
  if (gateway !== undefined && gateway.exitCode === null) {
    const exited = new Promise((resolve) => gateway.once('exit', resolve));
    gateway.kill('SIGTERM');
    await exited;
  }
  await api?.stop();
  if (redis !== undefined) {
    const keys = await redis.keys(`${PREFIX}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  }
  await new Promise((resolve) => upstream?.close(resolve));
}, 30_000);

const withAdminToken = { authorization: `Bearer ${GATEWAY_ADMIN_TOKEN}` };

/** Every key under the prefix, and each one's value whatever its type, as one text. */
async function everythingInRedis(): Promise<string> {
  const parts: string[] = [];
  for (const key of await redis.keys(`${PREFIX}*`)) {
    parts.push(key);
    const type = await redis.type(key);
    if (type === 'string') parts.push(String(await redis.get(key)));
    else if (type === 'hash') parts.push(JSON.stringify(await redis.hgetall(key)));
    else if (type === 'zset') parts.push(JSON.stringify(await redis.zrange(key, 0, -1, 'WITHSCORES')));
    else if (type === 'set') parts.push(JSON.stringify(await redis.smembers(key)));
    else if (type === 'list') parts.push(JSON.stringify(await redis.lrange(key, 0, -1)));
    else parts.push(`(${type})`);
  }
  return parts.join('\n');
}

describe('a credential header is never shown or stored in clear', () => {
  let hashed: string;

  it('is limited by its digest: two admitted, the third denied', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      statuses.push((await fetch(`${proxyUrl}/keys/x`, { headers: { 'x-api-key': RAW } })).status);
    }
    expect(statuses).toEqual([200, 200, 429]);
  });

  it('/usage needs the admin token, takes the raw value and answers with the digest', async () => {
    const url = `${adminUrl}/usage?rule=keys&client=${encodeURIComponent(`header:${RAW}`)}`;
    expect((await fetch(url)).status).toBe(401);
    const response = await fetch(url, { headers: withAdminToken });
    const text = await response.text();
    expect(response.status, text).toBe(200);
    const body = JSON.parse(text) as { client: string; limits: { remaining: number }[] };
    expect(body.client).toMatch(/^header:~[0-9a-f]{24}$/);
    expect(body.limits[0]!.remaining).toBe(0);
    expect(text).not.toContain(RAW);
    hashed = body.client;
  });

  it('/offenders on the gateway needs the token and names the digest', async () => {
    const url = `${adminUrl}/offenders?rule=keys&minutes=15`;
    expect((await fetch(url)).status).toBe(401);
    const text = await (await fetch(url, { headers: withAdminToken })).text();
    expect(JSON.parse(text)).toMatchObject({ items: [{ client: hashed, denied: 1 }] });
    expect(text).not.toContain(RAW);
  });

  it("the rules API's offenders (asked of the gateway with GATEWAY_ADMIN_TOKEN) name the digest", async () => {
    const response = await fetch(`${api.url}/rules/${ruleId}/offenders?minutes=15`, {
      headers: { authorization: `Bearer ${api.readToken}` },
    });
    const text = await response.text();
    expect(response.status, text).toBe(200);
    expect(JSON.parse(text)).toMatchObject({ items: [{ client: hashed }] });
    expect(text).not.toContain(RAW);
  });

  it('explain keys the raw value exactly as the gateway did, and shows only the digest', async () => {
    const response = await fetch(`${api.url}/rules/explain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${api.readToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ method: 'GET', path: '/keys/x', headers: { 'x-api-key': RAW } }),
    });
    const text = await response.text();
    expect(JSON.parse(text)).toMatchObject({ limits: [{ clientKey: hashed }] });
    expect(text).not.toContain(RAW);
  });

  it("the console's rendered page (offenders panel and explain) shows the digest only", async () => {
    const page = await browser.newPage();
    page.setDefaultTimeout(15_000);
    try {
      await page.goto(`${api.url}/console`);
      await page.getByLabel('Token').fill(api.adminToken);
      await page.getByRole('button', { name: 'Sign in' }).click();
      // generous waits: a busy machine renders slowly (what is asserted is the text, not its speed)
      const wait = { timeout: 15_000 };
      await expect.poll(() => page.locator('#status').textContent(), wait).toBe('Signed in.');
      await page.getByRole('button', { name: 'History of keys', exact: true }).click();
      await expect
        .poll(() => page.locator('#offenders').textContent(), { timeout: 15_000 })
        .toContain(hashed);
      await page.getByLabel('Path').fill('/keys/x');
      await page.getByLabel('Headers (one name: value per line)').fill(`x-api-key: ${RAW}`);
      await page.getByRole('button', { name: 'Explain' }).click();
      await expect.poll(() => page.locator('#explain-result').textContent(), wait).toContain(hashed);
      // what the page shows and holds: its text and its HTML, form fields emptied of what was typed
      await page.getByLabel('Headers (one name: value per line)').fill('');
      expect(await page.locator('body').textContent()).not.toContain(RAW);
      expect(await page.content()).not.toContain(RAW);
    } finally {
      await page.close();
    }
  });

  it('Redis holds no key or value with the raw credential', async () => {
    // the gateway sends its offender counts to Redis every 5 s: wait until they are there
    await waitFor(async () => (await everythingInRedis()).includes('offend'), 15_000, 'offenders in Redis');
    const everything = await everythingInRedis();
    expect(everything).toContain(hashed.slice('header:'.length));
    expect(everything).not.toContain(RAW);
  });

  it('neither process logged it, at debug level', async () => {
    expect(gatewayOutput.join('').length).toBeGreaterThan(0);
    expect(gatewayOutput.join('')).not.toContain(RAW);
    expect(api.output.join('')).not.toContain(RAW);
  });
});
