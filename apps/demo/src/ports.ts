/** Port checks done before starting anything, so "port in use" comes with the variable that fixes it. */
import { createServer } from 'node:net';

export class PortError extends Error {
  readonly code = 'DEMO_PORT_UNAVAILABLE';
}

/** Binds `host:port` for a moment; `port` 0 asks the system for a free one. Resolves the bound port. */
export function probePort(host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : port;
      server.close(() => resolve(bound));
    });
  });
}

/**
 * The port to hand to a service: `wanted` when it is free, any free port when `wanted` is 0.
 * Throws `PortError` naming `envName` when the port is taken.
 */
export async function choosePort(host: string, wanted: number, envName: string): Promise<number> {
  try {
    return await probePort(host, wanted);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EADDRINUSE' ? 'is in use' : `cannot be used (${code ?? (err as Error).message})`;
    throw new PortError(
      `port ${wanted} on ${host} ${why}: set ${envName} to another port, or to 0 for any free port`,
    );
  }
}
