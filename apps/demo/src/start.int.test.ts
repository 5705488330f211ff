/**
 * Runs the demo the way `pnpm start` does (`node apps/demo/dist/start.js` after `pnpm build`) on free
 * ports and a temporary DATA_DIR: a 200 then a 429 through the gateway (and what the upstream was
 * told), a stream and a WebSocket, the stacked rule's headers and 429 and the exemption, a clean stop on SIGTERM, and a restart that finds its rules, token and edits again without duplicating anything.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Rule, SecretClientKeys } from '@sluice/shared';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { repositoryRoot } from './services.js';
import type { UpstreamReply } from './upstream-server.js';

const ROOT = repositoryRoot();
const READY_LINE = 'Ready. Ctrl-C stops everything.';

interface RunningDemo {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitFor: (text: string, timeoutMs: number) => Promise<void>;
}

function runDemo(dataDir: string, env: Record<string, string> = {}): RunningDemo {
  const inherited = { ...process.env };
  for (const name of ['ADMIN_TOKEN', 'READ_TOKEN', 'DATABASE_URL', 'REDIS_URL', 'LOG_LEVEL', 'PORT']) {
    delete inherited[name];
  }
  const child = spawn(process.execPath, ['apps/demo/dist/start.js'], {
    cwd: ROOT,
    env: {
      ...inherited,
      NO_COLOR: '1',
      DATA_DIR: dataDir,
      DEMO_GATEWAY_PORT: '0',
      DEMO_ADMIN_PORT: '0',
      DEMO_RULES_API_PORT: '0',
      DEMO_UPSTREAM_PORT: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => {
    output += d;
  });
  child.stderr!.on('data', (d: Buffer) => {
    output += d;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const waitFor = async (text: string, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!output.includes(text)) {
      if (child.exitCode !== null)
        throw new Error(`demo exited ${child.exitCode} before "${text}":\n${output}`);
      if (Date.now() > deadline) throw new Error(`no "${text}" after ${timeoutMs} ms:\n${output}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  running.push(child);
  return { child, output: () => output, exited, waitFor };
}

/** The value printed after a banner label, e.g. `Gateway        http://…`. */
function printed(output: string, label: string): string {
  const match = new RegExp(`^ {2}${label} +(\\S+)`, 'm').exec(output);
  if (!match) throw new Error(`no "${label}" line in:\n${output}`);
  return match[1]!;
}

async function stopDemo(demo: RunningDemo): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  demo.child.kill('SIGTERM');
  const timeout = new Promise<never>((_, reject) =>
    setTimeout(() => reject(new Error(`demo did not stop within 20 s:\n${demo.output()}`)), 20_000),
  );
  return Promise.race([demo.exited, timeout]);
}

const running: ChildProcess[] = [];
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'sluice-demo-'));
});

afterAll(async () => {
  for (const child of running)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await rm(dataDir, { recursive: true, force: true });
});

let firstToken = '';

it('starts everything, gets a 200 then a 429 through the gateway, and stops cleanly on SIGTERM', async () => {
  const demo = runDemo(dataDir);
  await demo.waitFor(READY_LINE, 90_000);
  const out = demo.output();
  const gateway = printed(out, 'Gateway');
  const rulesApi = printed(out, 'Rules API');
  const adminUrl = printed(out, 'Gateway admin');
  firstToken = printed(out, 'Admin token');
  expect(out).toMatch(
    /Demo rules +created demo-account, demo-account-pro, demo-expensive, demo-global, demo-orders, demo-orders-partner, demo-per-ip, demo-shadow/,
  );

  const ok = await fetch(`${gateway}/api/hello`);
  expect(ok.status).toBe(200);
  expect(ok.headers.get('ratelimit-policy')).toBe('"demo-per-ip";q=5;w=60');
  const hello = (await ok.json()) as UpstreamReply;
  expect(hello).toMatchObject({ upstream: 'demo-upstream', method: 'GET', path: '/api/hello' });
  // what the upstream was told: who the client is, and the id the client got back
  expect(hello.requestId).toBe(ok.headers.get('x-request-id'));
  expect(hello.forwarded).toMatchObject({ for: '127.0.0.1', proto: 'http' });

  // a stream and a WebSocket through the gateway, as the README shows them
  const events = await (await fetch(`${gateway}/events?n=2&everyMs=50`)).text();
  expect(events.match(/^data: /gm)).toHaveLength(2);
  const ws = new WebSocket(`${gateway.replace(/^http/, 'ws')}/ws`);
  const received: string[] = [];
  ws.on('message', (data) => received.push(data.toString()));
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  ws.send('hi');
  await vi.waitFor(() => expect(received).toHaveLength(2));
  expect(JSON.parse(received[0]!)).toMatchObject({
    upstream: 'demo-upstream',
    forwarded: { for: '127.0.0.1' },
  });
  expect(received[1]).toBe('hi');
  ws.close();

  let denied: Response | undefined;
  for (let i = 0; i < 10 && !denied; i++) {
    const res = await fetch(`${gateway}/api/hello`);
    if (res.status === 429) denied = res;
    else await res.body?.cancel();
  }
  expect(denied?.status).toBe(429);
  expect(Number(denied!.headers.get('retry-after'))).toBeGreaterThan(0);
  expect(await denied!.json()).toMatchObject({ statusCode: 429, rule: 'demo-per-ip' });
  expect((await fetch(`${adminUrl}/metrics`)).status).toBe(200);

  // the stacked rule: one RateLimit item per limit, and a burst that ends in a 429 naming the limit
  const orders = `${gateway}/api/orders/42`;
  const alice = { 'x-api-key': 'alice' };
  const first = await fetch(orders, { headers: alice });
  expect(first.status).toBe(200);
  await first.body?.cancel();
  expect(first.headers.get('ratelimit-policy')).toBe(
    '"demo-orders.burst";q=5;w=5, "demo-orders.daily";q=100;w=86400, "demo-orders.everyone";q=30;w=60',
  );
  expect(first.headers.get('ratelimit')).toMatch(
    /^"demo-orders\.burst";r=4;t=\d+;pk=:[\w+/]+=*:, "demo-orders\.daily";r=99;t=\d+;pk=:[\w+/]+=*:, "demo-orders\.everyone";r=29;t=\d+$/,
  );
  let burstDenied: Response | undefined;
  for (let i = 0; i < 10 && !burstDenied; i++) {
    const res = await fetch(orders, { headers: alice });
    if (res.status === 429) burstDenied = res;
    else await res.body?.cancel();
  }
  expect(burstDenied?.status).toBe(429);
  expect(await burstDenied!.json()).toMatchObject({ statusCode: 429, rule: 'demo-orders', limit: 'burst' });
  // another key has its own burst
  const bob = await fetch(orders, { headers: { 'x-api-key': 'bob' } });
  expect(bob.status).toBe(200);
  await bob.body?.cancel();

  // the exemption: the same exhausted key, with the partner header, is not limited at all
  const exempt = await fetch(orders, { headers: { ...alice, 'x-partner': 'acme' } });
  expect(exempt.status).toBe(200);
  await exempt.body?.cancel();
  expect(exempt.headers.get('ratelimit')).toBeNull();
  expect(exempt.headers.get('ratelimit-policy')).toBeNull();

  // limits per verified customer: the printed tokens, as the banner's curl lines send them
  const account = `${gateway}/api/account/42`;
  const bearer = (who: string) => {
    const match = new RegExp(
      `^ {5}${who} \\(sub.*\\n {5}curl -si -H 'Authorization: Bearer ([^']+)'`,
      'm',
    ).exec(out);
    if (!match) throw new Error(`no token for ${who} in:\n${out}`);
    return { authorization: `Bearer ${match[1]}` };
  };
  const policyOf = async (headers: Record<string, string>) => {
    const res = await fetch(account, { headers });
    await res.body?.cancel();
    return res.headers.get('ratelimit-policy');
  };
  expect(await policyOf(bearer('Alice'))).toBe('"demo-account-pro.per-sub";q=10;w=60');
  expect(await policyOf(bearer('Bob'))).toBe('"demo-account.per-sub";q=3;w=60');
  expect(await policyOf({ ...bearer('Bob'), 'x-plan': 'pro' })).toBe('"demo-account.per-sub";q=3;w=60');

  // an edit over REST, which the restart below must keep
  const auth = { authorization: `Bearer ${firstToken}` };
  const rules = ((await (await fetch(`${rulesApi}/rules`, { headers: auth })).json()) as { items: Rule[] })
    .items;
  // who is blocked, with no Redis: the rules API asks the demo gateway's admin port (ANALYTICS_GATEWAYS)
  const demoOrders = rules.find((r) => r.name === 'demo-orders');
  const offenders = await fetch(`${rulesApi}/rules/${demoOrders?.id}/offenders?minutes=5`, { headers: auth });
  expect(offenders.status).toBe(200);
  // x-api-key is a credential: its key is the digest under the demo's CLIENT_KEY_SECRET, never the value
  const { clientKeySecret } = JSON.parse(await readFile(join(dataDir, 'demo-tokens.json'), 'utf8')) as {
    clientKeySecret: string;
  };
  const aliceKey = new SecretClientKeys(clientKeySecret).clientKey('alice')!;
  expect(((await offenders.json()) as { items: unknown[] }).items).toContainEqual({
    client: aliceKey,
    limit: 'burst',
    denied: expect.any(Number),
    shadow: false,
  });
  // ... and as a new user finds them: the console, in a real browser (Debian's chromium)
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${rulesApi}/console`);
    await page.getByLabel('Token').fill(firstToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('button', { name: 'History of demo-orders', exact: true }).click();
    const alicesRow = page.locator('#offenders tbody tr', { hasText: aliceKey });
    await alicesRow.waitFor({ timeout: 10_000 });
    expect(await alicesRow.textContent()).toMatch(/header:~[0-9a-f]{24}\s*burst\s*\d+\s*denied/);
    if (process.env.CONSOLE_SCREENSHOTS_DIR) {
      await page.locator('#offenders').scrollIntoViewIfNeeded();
      await page.screenshot({ path: join(process.env.CONSOLE_SCREENSHOTS_DIR, 'console-offenders.png') });
    }
  } finally {
    await browser.close();
  }
  const shadow = rules.find((r) => r.name === 'demo-shadow');
  if (shadow === undefined || !('limit' in shadow))
    throw new Error('demo-shadow is not a single-bucket rule');
  const put = await fetch(`${rulesApi}/rules/${shadow.id}`, {
    method: 'PUT',
    headers: { ...auth, 'content-type': 'application/json', 'if-match': `"${shadow.version}"` },
    body: JSON.stringify({
      name: shadow.name,
      match: shadow.match,
      limit: { ...shadow.limit, capacity: 4 },
      shadow: true,
    }),
  });
  expect(put.status).toBe(200);

  const status = await stopDemo(demo);
  expect(status).toEqual({ code: 0, signal: null });
  expect(demo.output()).toContain('Stopped.');
  await expect(fetch(`${gateway}/api/hello`)).rejects.toThrow();
  await expect(fetch(`${rulesApi}/readyz`)).rejects.toThrow();
}, 150_000);

it('restarts on the same DATA_DIR with the same token and rules, edits kept, nothing duplicated', async () => {
  expect(firstToken).not.toBe('');
  const demo = runDemo(dataDir);
  await demo.waitFor(READY_LINE, 90_000);
  const out = demo.output();
  expect(printed(out, 'Admin token')).toBe(firstToken);
  expect(out).toMatch(/Demo rules +8 rules already there, kept as they are/);
  const rulesApi = printed(out, 'Rules API');
  const rules = (
    (await (
      await fetch(`${rulesApi}/rules`, { headers: { authorization: `Bearer ${firstToken}` } })
    ).json()) as {
      items: Rule[];
    }
  ).items;
  expect(rules.map((r) => r.name)).toEqual([
    'demo-account',
    'demo-account-pro',
    'demo-expensive',
    'demo-global',
    'demo-orders',
    'demo-orders-partner',
    'demo-per-ip',
    'demo-shadow',
  ]);
  expect(rules.find((r) => r.name === 'demo-shadow')).toMatchObject({ limit: { capacity: 4 }, version: 2 });

  // the docker-compose `seed` service runs this very command against the rules API
  const seed = spawn(
    process.execPath,
    ['apps/cli/dist/rules.js', 'apply', '--create-only', 'apps/demo/demo-rules.yaml'],
    {
      cwd: ROOT,
      env: { ...process.env, RULES_API_URL: rulesApi, RULES_API_TOKEN: firstToken },
    },
  );
  let seedOut = '';
  seed.stdout.on('data', (d: Buffer) => {
    seedOut += d;
  });
  const seedCode = await new Promise<number | null>((resolve) => seed.once('exit', resolve));
  expect(seedCode).toBe(0);
  expect(seedOut).toContain('Nothing to do.');

  expect(await stopDemo(demo)).toEqual({ code: 0, signal: null });
}, 150_000);

it('refuses a port that is taken, naming the variable to change', async () => {
  const blocker: Server = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as { port: number }).port;
  try {
    const demo = runDemo(dataDir, { DEMO_GATEWAY_PORT: String(port) });
    const status = await demo.exited;
    expect(status.code).toBe(1);
    expect(demo.output()).toContain(
      `port ${port} on 127.0.0.1 is in use: set DEMO_GATEWAY_PORT to another port, or to 0 for any free port`,
    );
  } finally {
    blocker.close();
  }
});
