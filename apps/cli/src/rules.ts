#!/usr/bin/env node
/** Executable for `pnpm rules …` and the `cli` Docker image: see `cli.ts`. */
import { runCli } from './cli.js';

// `pnpm rules apply x.yaml` runs at the repository root; INIT_CWD is where the user typed it.
const cwd =
  process.env.npm_lifecycle_event === 'rules' && process.env.INIT_CWD ? process.env.INIT_CWD : process.cwd();

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  cwd,
});
