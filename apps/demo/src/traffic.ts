/**
 * `pnpm demo:traffic`: a short, bounded mix of traffic through the demo gateway (`pnpm start` in
 * another terminal), so that top offenders and usage have something to show (docs/visibility.md).
 *
 * About 260 requests over 10 s, to the loopback address only, from several clients: API keys on
 * /api/orders (mallory far over her burst, alice a little, bob never), per-IP clients on /api/hello
 * (each from its own 127.0.0.x source address where the system allows it), the shared search budget,
 * and the shadow rule on /api/beta (passes, but counted as would-be denied). Then it prints the
 * gateway's own top offenders and one client's usage.
 *
 * Reads the demo's gateway ports from the same variables and defaults as the demo
 * (`DEMO_GATEWAY_PORT`, `DEMO_ADMIN_PORT`).
 */
import { request } from 'node:http';
import { env } from 'node:process';
import { pathToFileURL } from 'node:url';
import { DEFAULT_PORTS, PORT_ENV } from './services.js';

/** One request of the plan. */
export interface PlannedRequest {
  path: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  /** the loopback source address (127.0.0.x) that stands for a client IP */
  from: string;
  /** which demo rule it exercises, for the summary */
  label: string;
}

export const TRAFFIC_ROUNDS = 10;
export const ROUND_MS = 1_000;

/** The requests of one round (one second): ~26 requests. */
export function roundPlan(): PlannedRequest[] {
  const plan: PlannedRequest[] = [];
  const add = (n: number, request: Omit<PlannedRequest, 'method'> & { method?: 'GET' | 'POST' }) => {
    for (let i = 0; i < n; i++) plan.push({ method: 'GET', ...request });
  };
  const key = (k: string) => ({ 'x-api-key': k });
  // demo-orders: a burst of 5 per key, +1/s
  add(8, { path: '/api/orders/42', headers: key('mallory'), from: '127.0.0.1', label: 'orders mallory' });
  add(2, { path: '/api/orders/42', headers: key('alice'), from: '127.0.0.1', label: 'orders alice' });
  add(1, { path: '/api/orders/7', headers: key('bob'), from: '127.0.0.1', label: 'orders bob' });
  // demo-per-ip: 5 per IP, refilled 5/min
  add(6, { path: '/api/hello', headers: {}, from: '127.0.0.9', label: 'hello 127.0.0.9' });
  add(2, { path: '/api/hello', headers: {}, from: '127.0.0.1', label: 'hello 127.0.0.1' });
  // demo-global: 20 a minute for everyone together
  add(3, { path: '/api/search', headers: {}, from: '127.0.0.5', label: 'search' });
  // demo-shadow: 3/min per IP, never blocked
  add(4, { path: '/api/beta/feature', headers: {}, from: '127.0.0.3', label: 'beta (shadow)' });
  return plan;
}

function readPort(name: 'gateway' | 'admin'): number {
  const raw = env[PORT_ENV[name]]?.trim();
  if (raw === undefined || raw === '') return DEFAULT_PORTS[name];
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(
      `${PORT_ENV[name]}=${raw}: give the port the demo printed in its banner (0 = "any free port" cannot be guessed)`,
    );
  }
  return port;
}

function send(
  port: number,
  planned: PlannedRequest,
  localAddress: string | undefined,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: planned.path,
        method: planned.method,
        headers: planned.headers,
        localAddress,
        agent: false,
        timeout: 5_000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', reject);
    req.end();
  });
}

/** Whether this system lets a client use 127.0.0.x source addresses other than 127.0.0.1 (Linux does). */
async function loopbackAliasesWork(port: number): Promise<boolean> {
  try {
    await send(
      port,
      { path: '/healthz-probe', method: 'GET', headers: {}, from: '127.0.0.2', label: '' },
      '127.0.0.2',
    );
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'EADDRNOTAVAIL';
  }
}

async function main(): Promise<void> {
  const gatewayPort = readPort('gateway');
  const adminPort = readPort('admin');
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  try {
    await fetch(`${adminUrl}/readyz`);
  } catch {
    throw new Error(
      `no demo gateway answers at ${adminUrl}: start the demo first (pnpm start), with the same DEMO_* ports`,
    );
  }
  const aliases = await loopbackAliasesWork(gatewayPort);
  if (!aliases)
    console.log('(127.0.0.x source addresses are not available here: every IP client is 127.0.0.1)');

  const tally = new Map<string, Map<number, number>>();
  const started = Date.now();
  console.log(
    `Sending ${TRAFFIC_ROUNDS} rounds of ${roundPlan().length} requests to http://127.0.0.1:${gatewayPort} …`,
  );
  for (let round = 0; round < TRAFFIC_ROUNDS; round++) {
    const roundStart = Date.now();
    const results = await Promise.allSettled(
      roundPlan().map(async (planned) => {
        const { status } = await send(gatewayPort, planned, aliases ? planned.from : undefined);
        const byStatus = tally.get(planned.label) ?? new Map<number, number>();
        byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
        tally.set(planned.label, byStatus);
      }),
    );
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw new Error(`the gateway did not answer: ${(failed as PromiseRejectedResult).reason}`);
    const waitMs = ROUND_MS - (Date.now() - roundStart);
    if (waitMs > 0 && round < TRAFFIC_ROUNDS - 1) await new Promise((r) => setTimeout(r, waitMs));
  }
  console.log(`Done in ${((Date.now() - started) / 1000).toFixed(1)} s. Answers by client:`);
  for (const [label, byStatus] of tally) {
    const parts = [...byStatus].sort(([a], [b]) => a - b).map(([status, n]) => `${n}× ${status}`);
    console.log(`  ${label.padEnd(18)} ${parts.join(', ')}`);
  }

  for (const rule of ['demo-orders', 'demo-per-ip', 'demo-shadow']) {
    const response = await fetch(`${adminUrl}/offenders?rule=${rule}&minutes=15`);
    const body = (await response.json()) as {
      items?: { client: string; limit: string; denied: number; shadow: boolean }[];
    };
    console.log(`\nTop offenders of ${rule} (GET ${adminUrl}/offenders?rule=${rule}):`);
    if (!response.ok || body.items === undefined) {
      console.log(`  ${response.status} ${JSON.stringify(body)}`);
      continue;
    }
    for (const item of body.items.slice(0, 5)) {
      const limit = item.limit === '' ? '' : ` (${item.limit})`;
      console.log(
        `  ${item.client.padEnd(22)} ${String(item.denied).padStart(4)} ${item.shadow ? 'would be denied (shadow)' : 'denied'}${limit}`,
      );
    }
  }
  console.log(`\nUsage of mallory now: curl '${adminUrl}/usage?rule=demo-orders&client=header:mallory'`);
  console.log(
    'The console (rules API /console) shows offenders only when the rules API has REDIS_URL: the embedded demo has no Redis, so ask the gateway as above.',
  );
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(`demo:traffic: ${(error as Error).message}`);
    process.exit(1);
  });
}
