/**
 * request-head.ts claims to refuse exactly what Node's HTTP/1 parser refuses: each byte in a target,
 * each byte in a field value and a few methods go to a real Node server here, and the module must
 * agree with what it answered.
 */
import { createServer, METHODS, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldValueAsRead, methodError, PARSER_METHODS, targetError } from './request-head.js';

let server: Server;
let port: number;

beforeAll(async () => {
  server = createServer((req, res) => res.end(JSON.stringify({ url: req.url, x: req.headers['x-v'] })));
  server.on('clientError', (_error, socket) =>
    socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n'),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** Sends one request head; resolves with the status and, on 200, the header value the server read. */
function send(head: Buffer): Promise<{ status: number; value?: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port }, () => socket.end(head));
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const body = text.slice(text.indexOf('\r\n\r\n') + 4);
      resolve(
        status === 200
          ? { status, value: (JSON.parse(Buffer.from(body, 'latin1').toString()) as { x?: string }).x }
          : { status },
      );
    });
  });
}

const bytes = Array.from({ length: 256 }, (_, b) => b).filter((b) => b !== 0x0a && b !== 0x0d);

describe('request-head: what Node 20 refuses', () => {
  it('refuses a target byte exactly when Node does (visible ASCII only)', async () => {
    const wrong: string[] = [];
    for (const b of bytes) {
      const head = Buffer.concat([
        Buffer.from('GET /a'),
        Buffer.from([b]),
        Buffer.from('b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n'),
      ]);
      const accepted = (await send(head)).status === 200;
      // the byte as a client would have written the character (a byte over 0x7F starts UTF-8)
      const refused = targetError(`/a${String.fromCharCode(b)}b`) !== undefined;
      if (accepted === refused) wrong.push(`0x${b.toString(16)}: Node ${accepted ? 'accepts' : 'refuses'}`);
    }
    expect(wrong).toEqual([]);
    expect(targetError('/café')?.message).toContain('%C3%A9');
  });

  it('refuses a field value byte exactly when Node does, and reads values as Node does', async () => {
    const wrong: string[] = [];
    for (const b of bytes) {
      const head = Buffer.concat([
        Buffer.from('GET / HTTP/1.1\r\nHost: a\r\nX-V: a'),
        Buffer.from([b]),
        Buffer.from('b\r\nConnection: close\r\n\r\n'),
      ]);
      const answer = await send(head);
      const read = fieldValueAsRead('x-v', Buffer.from([0x61, b, 0x62]).toString('latin1'));
      if ((answer.status === 200) !== (typeof read === 'string')) wrong.push(`0x${b.toString(16)}`);
    }
    expect(wrong).toEqual([]);
    for (const value of [' \t free \t', 'a\tb', 'ключ', 'é ', '']) {
      const answer = await send(
        Buffer.from(`GET / HTTP/1.1\r\nHost: a\r\nX-V: ${value}\r\nConnection: close\r\n\r\n`, 'utf8'),
      );
      expect(fieldValueAsRead('x-v', value), JSON.stringify(value)).toBe(answer.value);
    }
  });

  it('takes the methods Node knows, case-sensitively', async () => {
    for (const method of ['GET', 'PROPFIND', 'get', 'Post', 'FOO']) {
      const answer = await send(Buffer.from(`${method} / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`));
      expect(methodError(method) === undefined, method).toBe(answer.status === 200);
    }
    expect(methodError('get')?.message).toContain('GET?');
    expect([...PARSER_METHODS].sort()).toEqual([...METHODS].sort());
  });
});
