/**
 * The OpenAPI document through the tools users point at it: Redocly CLI's `recommended` lint (the
 * version pinned in package.json) passes without a warning, and openapi-typescript types every enum as
 * a union of its values (TypeBox's `{ enum }` without a `type` came out as `@enum {unknown}`). Plus what
 * the lint stands for, checked directly: servers, a license, a unique operationId per operation, a 4xx on
 * every operation.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import openapiTS, { astToString } from 'openapi-typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Backend, postgresBackend, startApp } from './support/app.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'] as const;

// biome-ignore lint/suspicious/noExplicitAny: the OpenAPI document as JSON, checked by the assertions
type Doc = any;

let backend: Backend;
let app: FastifyInstance;
let doc: Doc;
let dir: string;
let file: string;

beforeAll(async () => {
  // the document needs no table: the database is never queried
  backend = await postgresBackend();
  app = await startApp(backend, {}, { skipMigrations: true });
  const res = await app.inject({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  doc = res.json();
  dir = await mkdtemp(path.join(tmpdir(), 'sluice-openapi-'));
  file = path.join(dir, 'openapi.json');
  await writeFile(file, res.body);
});

afterAll(async () => {
  await app?.close();
  await backend?.cleanup();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function operations(): { key: string; op: Doc }[] {
  return Object.entries(doc.paths as Record<string, Doc>).flatMap(([url, item]) =>
    METHODS.filter((m) => item[m] !== undefined).map((m) => ({
      key: `${m.toUpperCase()} ${url}`,
      op: item[m],
    })),
  );
}

describe('the OpenAPI document', () => {
  it('has servers, a license, and a unique operationId and a 4xx answer on every operation', () => {
    expect(doc.servers).toEqual([{ url: '/', description: expect.any(String) }]);
    expect(doc.info.license).toMatchObject({
      name: expect.any(String),
      url: expect.stringMatching(/^https:/),
    });
    const ops = operations();
    expect(ops.map((o) => o.key)).toEqual(
      expect.arrayContaining(['GET /healthz', 'GET /readyz', 'PUT /rules/{id}']),
    );
    for (const { key, op } of ops) {
      expect(op.operationId, key).toMatch(/^[a-z][A-Za-z]+$/);
      expect(
        Object.keys(op.responses).some((s) => /^4/.test(s)),
        `${key} has a 4xx`,
      ).toBe(true);
    }
    const ids = ops.map((o) => o.op.operationId);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("passes Redocly CLI's recommended lint with no error and no warning", async () => {
    const { stdout, stderr } = await promisify(execFile)(
      path.join(packageDir, 'node_modules/.bin/redocly'),
      ['lint', '--extends=recommended', '--format=summary', file],
      { env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } },
    );
    const output = `${stdout}${stderr}`;
    expect(output).toContain('Woohoo! Your API description is valid.');
    expect(output).not.toMatch(/You have \d+ warnings?/);
  }, 60_000);

  it('gives openapi-typescript a union for every enum, none typed unknown', async () => {
    const types = astToString(await openapiTS(new URL(`file://${file}`)));
    expect(types).not.toContain('@enum {unknown}');
    expect(types).toMatch(/mode\?: "exact" \| "lease";/);
    expect(types).toMatch(/action: "create" \| "update" \| "delete";/);
    expect(types).toMatch(/algorithm\?: "token-bucket" \| "sliding-window" \| "concurrency";/);
    expect(types).toMatch(/from: "header" \| "duration" \| "bytes";/);
    expect(types).toMatch(/role: "admin" \| "read" \| "anonymous";/);
  }, 60_000);

  it("documents the health routes' 400 truly: a request the server cannot parse gets it, in the Error shape", async () => {
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    const port = Number(new URL(address).port);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      let data = '';
      socket.on('data', (chunk) => {
        data += chunk;
      });
      socket.on('close', () => resolve(data));
      socket.on('error', reject);
      socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nnot a header line\r\n\r\n');
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
    expect(body).toEqual({ statusCode: 400, error: 'Bad Request', message: expect.any(String) });
    expect(doc.paths['/healthz'].get.responses['400'].content['application/json'].schema.$ref).toBe(
      '#/components/schemas/Error',
    );
  });
});
