/**
 * The real process (`src/server.ts`): bad environment → exit 1 with one line per variable; JSON
 * logs with request ids and no tokens; SIGTERM finishes the request in flight, then exits 0.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, type TestDatabase } from '@sluice/test-support';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, READ_TOKEN, ruleInput } from './support/app.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const children: ChildProcessWithoutNullStreams[] = [];

function startServer(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--conditions=sluice-source', '--import', 'tsx', 'src/server.ts'], {
    cwd: packageDir,
    env: { PATH: process.env.PATH ?? '', ...env },
  });
  children.push(child);
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (d) => {
    out.stdout += d;
  });
  child.stderr.on('data', (d) => {
    out.stderr += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, out, exited };
}

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

async function waitFor<T>(check: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('configuration errors', () => {
  it('exits 1 with the one line saying ADMIN_TOKEN is missing', async () => {
    const { out, exited } = startServer({});
    expect(await exited).toBe(1);
    expect(out.stderr).toBe(
      'ADMIN_TOKEN: is required (or set AUTH_DISABLED=true to run without authentication)\n',
    );
  });

  it('exits 1 with one line per bad variable', async () => {
    const { out, exited } = startServer({
      PORT: 'eighty',
      DATABASE_URL: 'mysql://root:secret@db/x',
      LOG_LEVEL: 'loud',
    });
    expect(await exited).toBe(1);
    expect(out.stderr.trimEnd().split('\n')).toEqual([
      'PORT: must be an integer from 0 to 65535 (got "eighty")',
      'DATABASE_URL: must start with postgres:// or postgresql:// (got scheme "mysql:")',
      'ADMIN_TOKEN: is required (or set AUTH_DISABLED=true to run without authentication)',
      'LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent (got "loud")',
    ]);
    expect(out.stderr).not.toContain('secret');
  });
});

describe('a running server', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  // Spawning node + tsx on a busy 2-core machine can take a while; the bound is for hangs only.
  it('logs JSON lines with request ids and never a token; SIGTERM lets the request in flight finish', async () => {
    const { child, out, exited } = startServer({
      ADMIN_TOKEN,
      READ_TOKEN,
      DATABASE_URL: db.url,
      PORT: '0',
      HOST: '127.0.0.1',
    });
    const base = await waitFor(
      () => /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out.stdout)?.[1],
      15_000,
    );

    const health = await fetch(`${base}/healthz`, { headers: { 'x-request-id': 'probe-1' } });
    expect(health.status).toBe(200);
    const denied = await fetch(`${base}/rules`, { headers: { authorization: `Bearer ${READ_TOKEN}x` } });
    expect(denied.status).toBe(401);

    // A POST whose body is still arriving when SIGTERM comes must still be answered.
    const body = JSON.stringify(ruleInput());
    const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${base}/rules`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ADMIN_TOKEN}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
      req.on('error', reject);
      req.write(body.slice(0, 10));
      setTimeout(() => {
        child.kill('SIGTERM');
        setTimeout(() => req.end(body.slice(10)), 300);
      }, 200);
    });
    const answered = await response;
    expect(answered.status, answered.body).toBe(201);
    expect(await exited).toBe(0);

    const lines = out.stdout.trim().split('\n');
    const records = lines.map((line) => JSON.parse(line));
    expect(records.some((r) => r.reqId === 'probe-1' && r.msg === 'request completed')).toBe(true);
    expect(
      records.filter((r) => r.msg === 'request completed').every((r) => typeof r.reqId === 'string'),
    ).toBe(true);
    expect(records.some((r) => /closing/.test(r.msg))).toBe(true);
    expect(out.stdout + out.stderr).not.toContain(ADMIN_TOKEN);
    expect(out.stdout + out.stderr).not.toContain(READ_TOKEN);
  }, 60_000);
});
