// Child processes for benchmarks: started pinned to a CPU with taskset, stopped at exit.
import { type ChildProcess, spawn } from 'node:child_process';
import { freePort } from '@sluice/test-support';

/** A TCP port nothing listens on now, on 127.0.0.1 (the tests' helper). */
export { freePort };

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

export interface Started {
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Spawns `cmd` pinned to `cpu` and resolves once `ready()` says so (polled), or rejects after 30 s. */
export async function startPinned(
  name: string,
  cpu: string,
  cmd: string[],
  env: Record<string, string>,
  ready: () => Promise<boolean>,
): Promise<Started> {
  const child = spawn('taskset', ['-c', cpu, ...cmd], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  const keep = (d: Buffer) => {
    output = (output + d.toString()).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${name} exited early (${child.exitCode}):\n${output}`);
    if (await ready().catch(() => false)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (Date.now() >= deadline) throw new Error(`${name} did not become ready:\n${output}`);
  return {
    child,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      child.kill('SIGKILL');
      children.delete(child);
    },
  };
}

export async function httpOk(url: string, headers: Record<string, string> = {}): Promise<boolean> {
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(1000) });
  await res.arrayBuffer();
  return res.ok;
}
