/**
 * A TCP proxy in front of the test Postgres that a test controls:
 * - `stop()`: port closed, every connection cut (what clients see when Postgres stops);
 * - `freeze()`: nothing answers any more, on open connections or new ones (a hung server, a lost
 *   network: no RST, no data);
 * - `listen()` again on the same port to bring the database back.
 */
import net from 'node:net';

interface Pair {
  client: net.Socket;
  upstream?: net.Socket;
}

export class TcpProxy {
  private server: net.Server | undefined;
  private readonly pairs = new Set<Pair>();
  private frozen = false;

  private constructor(
    private readonly target: { host: string; port: number },
    public port: number,
  ) {}

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const proxy = new TcpProxy(target, 0);
    await proxy.listen();
    return proxy;
  }

  async listen(): Promise<void> {
    this.frozen = false;
    const server = net.createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  private accept(client: net.Socket) {
    const pair: Pair = { client };
    this.pairs.add(pair);
    const drop = () => {
      client.destroy();
      pair.upstream?.destroy();
      this.pairs.delete(pair);
    };
    client.on('error', drop);
    client.on('close', drop);
    if (this.frozen) return; // accepted, never answered
    const upstream = net.connect(this.target.port, this.target.host);
    pair.upstream = upstream;
    upstream.on('error', drop);
    upstream.on('close', drop);
    client.pipe(upstream).pipe(client);
  }

  /** Stops forwarding in both directions on every connection, and answers no new one. */
  freeze(): void {
    this.frozen = true;
    for (const { client, upstream } of this.pairs) {
      client.unpipe();
      upstream?.unpipe();
      client.pause();
      upstream?.pause();
    }
  }

  /** Closes the port and cuts every open connection. */
  async stop(): Promise<void> {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream?.destroy();
    }
    this.pairs.clear();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** A port on 127.0.0.1 where nothing listens (connections are refused). */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
