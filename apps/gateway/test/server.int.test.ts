/**
 * The gateway as a process, started the way operators start it (server.ts, configured only by the
 * environment): configuration errors, JSON logs on stdout, graceful stop on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { freePort, sleep, waitFor } from '@sluice/test-support';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueKeyPrefix } from './helpers/gateway.js';
import { http } from './helpers/http.js';
import { READ_TOKEN, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

const GATEWAY_DIR = fileURLToPath(new URL('../', import.meta.url));

interface Spawned {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

function spawnGateway(env: Record<string, string>): Spawned {
  const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'], {
    cwd: GATEWAY_DIR,
    // only what the test gives, plus PATH: the process is configured by its environment alone
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: () => stdout, stderr: () => stderr, exit };
}

let api: RulesApi;
let upstream: Upstream;
const children: ChildProcess[] = [];

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
}, 60_000);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await Promise.all([api?.close(), upstream?.close()]);
});

describe('gateway process', () => {
  it('exits 1 with one line per bad variable', async () => {
    const run = spawnGateway({ PORT: 'eighty', STORE_FAILURE: 'maybe', TRUST_PROXY: '10.0.0.0/99' });
    children.push(run.child);
    expect(await run.exit).toBe(1);
    const lines = run.stderr().trim().split('\n');
    expect(lines).toEqual([
      'PORT: must be an integer from 0 to 65535 (got "eighty")',
      'UPSTREAMS: is required (e.g. /orders=http://orders:3000,/=http://web:3000)',
      'RULES_API_URL: is required (e.g. http://rules-api:8081)',
      'TRUST_PROXY: must be true, false, a hop count, or a list of IP addresses, CIDRs (10.0.0.0/8) and loopback, linklocal, uniquelocal (got "10.0.0.0/99")',
      'STORE_FAILURE: must be one of local, open, closed (got "maybe")',
    ]);
  }, 30_000);

  /** A gateway on free ports in front of the upstream, once it is ready; `env` adds to its settings. */
  const startReady = async (env: Record<string, string> = {}) => {
    const [port, adminPort] = [await freePort(), await freePort()];
    const run = spawnGateway({
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      HOST: '127.0.0.1',
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: api.url,
      RULES_API_TOKEN: READ_TOKEN,
      ...env,
    });
    children.push(run.child);
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).status === 200,
      20_000,
      'readiness',
    );
    return { run, port };
  };
  /** What a gateway logged so far, one JSON object per line. */
  const logLinesOf = (run: ReturnType<typeof spawnGateway>) =>
    run
      .stdout()
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { level: number; msg: string });

  it('logs JSON to stdout, warns loudly without REDIS_URL, and finishes in-flight requests on SIGTERM', async () => {
    const { run, port } = await startReady();
    const logLines = logLinesOf(run);
    expect(logLines.some((l) => l.level === 40 && l.msg.includes('REDIS_URL is not set'))).toBe(true);

    const inFlight = http(port, '/slow/x?ms=1500');
    await sleep(300);
    run.child.kill('SIGTERM');
    const answer = await inFlight;
    expect(answer.status).toBe(200);
    expect(answer.json().url).toBe('/slow/x?ms=1500');
    expect(await run.exit).toBe(0);
    expect(run.stdout()).toContain('finishing in-flight requests');
    // stopped: nothing listens any more
    await expect(http(port, '/x', { timeoutMs: 1_000 })).rejects.toThrow();
  }, 30_000);

  it('says at start whether the limiter runs as a Redis Function library or falls back to EVALSHA', async () => {
    const user = `sluice-test-${randomUUID()}`;
    const admin = new Redis('redis://127.0.0.1:6379');
    await admin.call('ACL', 'SETUSER', user, 'on', '>secret', '~*', '&*', '+@all', '-function');
    try {
      const logsWith = async (redisUrl: string) => {
        const { run } = await startReady({
          REDIS_URL: redisUrl,
          REDIS_KEY_PREFIX: uniqueKeyPrefix('server'),
        });
        run.child.kill('SIGTERM');
        await run.exit;
        return logLinesOf(run);
      };
      const functions = await logsWith('redis://127.0.0.1:6379');
      expect(functions.some((l) => l.level === 30 && l.msg.includes('Redis Function library (FCALL)'))).toBe(
        true,
      );
      expect(functions.some((l) => l.msg.includes('EVALSHA'))).toBe(false);
      const fallback = await logsWith(`redis://${user}:secret@127.0.0.1:6379`);
      expect(fallback.some((l) => l.level === 40 && l.msg.includes('decisions go by EVALSHA'))).toBe(true);
    } finally {
      await admin.call('ACL', 'DELUSER', user);
      admin.disconnect();
    }
  }, 60_000);
});
