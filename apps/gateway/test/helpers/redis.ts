/** A redis-server child process on a port of its own, for tests that kill Redis and bring it back. */
import { type ChildProcess, spawn } from 'node:child_process';
import { createConnection } from 'node:net';
import { freePort, waitFor } from '@sluice/test-support';

export interface RedisProcess {
  url: string;
  port: number;
  /** SIGKILLs the server */
  kill(): Promise<void>;
  /** starts it again on the same port (empty: no persistence) */
  restart(): Promise<void>;
  /** sends a signal to the server (SIGSTOP freezes it: connections stay open, nothing answers) */
  signal(signal: NodeJS.Signals): void;
  close(): Promise<void>;
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' }, () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startRedisServer(): Promise<RedisProcess> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const launch = async () => {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    );
    await waitFor(() => ping(port), 10_000, `redis-server on port ${port}`);
  };
  const kill = async () => {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGKILL');
    await exited;
  };
  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    kill,
    restart: launch,
    signal: (signal) => {
      child?.kill(signal);
    },
    close: async () => {
      child?.kill('SIGCONT');
      await kill();
    },
  };
}
