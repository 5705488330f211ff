/**
 * One kept-alive HTTP/1.1 connection that sends hand-made request heads (any bytes: odd Host
 * spellings, tabs, repeated headers, raw UTF-8 targets) and reads their answers one at a time, so a
 * test can send a thousand raw requests without a thousand connects. The connection is opened again
 * whenever the server closed it (Node closes after a request its parser refuses).
 */
import { connect, type Socket } from 'node:net';

export interface RawAnswer {
  status: number;
  /** lowercase name → value (the last line wins: the tests read single-valued headers) */
  headers: Record<string, string>;
  body: string;
}

/** The first whole answer in `buffer` and how many bytes it took; undefined while incomplete. */
function parseAnswer(
  buffer: Buffer,
  noBody: boolean,
  closed: boolean,
): { answer: RawAnswer; used: number } | undefined {
  const end = buffer.indexOf('\r\n\r\n');
  if (end === -1) return undefined;
  const lines = buffer.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  const start = end + 4;
  const done = (body: Buffer, used: number) => ({ answer: { status, headers, body: body.toString() }, used });
  if (noBody || status === 204 || status === 304) return done(Buffer.alloc(0), start);
  if (headers['transfer-encoding'] === 'chunked') {
    const parts: Buffer[] = [];
    let at = start;
    for (;;) {
      const lineEnd = buffer.indexOf('\r\n', at);
      if (lineEnd === -1) return undefined;
      const size = Number.parseInt(buffer.subarray(at, lineEnd).toString('latin1'), 16);
      if (buffer.length < lineEnd + 2 + size + 2) return undefined;
      parts.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
      if (size === 0) return done(Buffer.concat(parts), at);
    }
  }
  if (headers['content-length'] !== undefined) {
    const length = Number(headers['content-length']);
    if (buffer.length - start < length) return undefined;
    return done(buffer.subarray(start, start + length), start + length);
  }
  // no framing: the body runs to the close
  return closed ? done(buffer.subarray(start), buffer.length) : undefined;
}

export class RawConnection {
  #socket: Socket | undefined;
  #buffer = Buffer.alloc(0);
  #closed = true;
  #wake: (() => void) | undefined;

  constructor(private readonly port: number) {}

  /** Sends one request head (no body) and resolves with its answer; `head` ends with the empty line. */
  async send(head: Buffer, method: string): Promise<RawAnswer> {
    if (this.#closed) this.#open();
    this.#socket!.write(head);
    for (;;) {
      const parsed = parseAnswer(this.#buffer, method === 'HEAD', this.#closed);
      if (parsed !== undefined) {
        this.#buffer = this.#buffer.subarray(parsed.used);
        if (parsed.answer.headers.connection === 'close') this.close();
        return parsed.answer;
      }
      if (this.#closed) throw new Error('the connection closed before a whole answer arrived');
      await this.#more();
    }
  }

  close(): void {
    this.#socket?.destroy();
    this.#socket = undefined;
    this.#closed = true;
  }

  #open(): void {
    const socket = connect({ host: '127.0.0.1', port: this.port });
    this.#socket = socket;
    this.#buffer = Buffer.alloc(0);
    this.#closed = false;
    socket.on('data', (chunk: Buffer) => {
      if (this.#socket !== socket) return;
      this.#buffer = Buffer.concat([this.#buffer, chunk]);
      this.#wake?.();
    });
    const closed = () => {
      if (this.#socket !== socket) return;
      this.#closed = true;
      this.#wake?.();
    };
    socket.on('close', closed);
    socket.on('error', closed);
  }

  /** Waits until more bytes arrive or the connection closes (at most 15 s). */
  #more(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no answer within 15 s')), 15_000);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }
}
