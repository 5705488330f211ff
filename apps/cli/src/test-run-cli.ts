/** Runs the CLI in-process for tests, collecting what it writes. */
import { type CliIo, runCli } from './cli.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export async function runCliCaptured(args: string[], io: Omit<CliIo, 'stdout' | 'stderr'>): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, {
    ...io,
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
  });
  return { code, stdout, stderr };
}
