/**
 * `joinedHeaderValue` must give the value Node gives a header in `req.headers`, since a gateway keys
 * clients by that value and explain by this function: checked against a real Node server receiving
 * the same field lines.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { joinedHeaderValue } from './facts.js';

const NAMES = [
  'x-api-key',
  'cookie',
  'authorization',
  'user-agent',
  'x-tier',
  'proxy-authorization',
  'referer',
];

let received: { headers: IncomingHttpHeaders; distinct: NodeJS.Dict<string[]> } | undefined;
const server = createServer((req, res) => {
  received = { headers: req.headers, distinct: req.headersDistinct };
  res.end();
});

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

/** Sends one request with these field lines; resolves with what the server saw. */
async function send(lines: [string, string][]) {
  const { port } = server.address() as AddressInfo;
  const head = `GET / HTTP/1.1\r\nHost: x\r\n${lines.map(([n, v]) => `${n}: ${v}\r\n`).join('')}Connection: close\r\n\r\n`;
  received = undefined;
  await new Promise<void>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.end(head));
    socket.on('data', () => {});
    socket.on('close', () => resolve());
    socket.on('error', reject);
  });
  return received!;
}

describe('joinedHeaderValue ≡ Node', () => {
  for (const name of NAMES) {
    it(`${name}: one line, two lines, three lines with spaces`, async () => {
      for (const values of [['a'], ['a', 'b'], ['a b', ' c', 'd=1']]) {
        const seen = await send(values.map((value) => [name, value]));
        expect(joinedHeaderValue(name, seen.distinct[name])).toBe(seen.headers[name]);
      }
    });
  }

  it('absent is undefined', async () => {
    const seen = await send([['x-other', '1']]);
    expect(joinedHeaderValue('x-api-key', seen.distinct['x-api-key'])).toBeUndefined();
  });
});
