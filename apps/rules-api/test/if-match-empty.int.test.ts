/**
 * `If-Match:` with an empty value, sent as raw bytes over a socket (HTTP clients tend to drop or
 * refuse an empty header): PUT and DELETE answer 400 SLUICE_IF_MATCH_EMPTY naming the header and
 * change nothing, where the header used to be taken as absent and the write went through.
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  admin,
  type Backend,
  createRule,
  postgresBackend,
  ruleInput,
  startApp,
} from './support/app.js';

/** Sends `head` (CRLF lines, without the blank line) and `body`; resolves with status and parsed body. */
function rawRequest(port: number, head: string[], body = '') {
  return new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      data += chunk;
    });
    socket.on('error', reject);
    socket.on('end', () => {
      const [top = '', rest = ''] = data.split('\r\n\r\n');
      const status = Number(top.split(' ')[1]);
      resolve({ status, body: rest === '' ? {} : JSON.parse(rest) });
    });
    const lines = [
      ...head,
      'Host: 127.0.0.1',
      'Connection: close',
      `Content-Length: ${Buffer.byteLength(body)}`,
    ];
    // write, not end: a half-closed socket may be dropped before the answer; `Connection: close` ends it
    socket.write(`${lines.join('\r\n')}\r\n\r\n${body}`);
  });
}

describe('an empty If-Match', () => {
  let backend: Backend;
  let app: FastifyInstance;
  let port: number;
  beforeAll(async () => {
    backend = await postgresBackend();
    app = await startApp(backend);
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await app?.close();
    await backend?.cleanup();
  });

  it('PUT with `If-Match:` (empty) is a 400 naming the header, and the rule keeps its version', async () => {
    const rule = await createRule(app, ruleInput());
    const res = await rawRequest(
      port,
      [
        `PUT /rules/${rule.id} HTTP/1.1`,
        `Authorization: Bearer ${ADMIN_TOKEN}`,
        'Content-Type: application/json',
        'If-Match:',
      ],
      JSON.stringify(ruleInput({ name: rule.name, description: 'unconditional?' })),
    );
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ statusCode: 400, code: 'SLUICE_IF_MATCH_EMPTY' });
    expect(res.body.message).toMatch(/^headers\/if-match is empty/);
    const after = await app.inject({ method: 'GET', url: `/rules/${rule.id}`, headers: admin });
    expect(after.json()).toMatchObject({ version: 1 });
    expect(after.json().description).toBeUndefined();
  });

  it('DELETE with `If-Match:` (spaces only) is a 400, and the rule is still there', async () => {
    const rule = await createRule(app, ruleInput());
    const res = await rawRequest(port, [
      `DELETE /rules/${rule.id} HTTP/1.1`,
      `Authorization: Bearer ${ADMIN_TOKEN}`,
      'If-Match:   ',
    ]);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'SLUICE_IF_MATCH_EMPTY' });
    const after = await app.inject({ method: 'GET', url: `/rules/${rule.id}`, headers: admin });
    expect(after.statusCode).toBe(200);
  });

  it('without the header the write is still unconditional, and `If-Match: *` still matches any version', async () => {
    const rule = await createRule(app, ruleInput());
    const put = await rawRequest(
      port,
      [
        `PUT /rules/${rule.id} HTTP/1.1`,
        `Authorization: Bearer ${ADMIN_TOKEN}`,
        'Content-Type: application/json',
      ],
      JSON.stringify(ruleInput({ name: rule.name })),
    );
    expect(put.status).toBe(200);
    const del = await rawRequest(port, [
      `DELETE /rules/${rule.id} HTTP/1.1`,
      `Authorization: Bearer ${ADMIN_TOKEN}`,
      'If-Match: *',
    ]);
    expect(del.status).toBe(204);
  });
});
