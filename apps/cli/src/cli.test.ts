import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@sluice/test-support';
import { expect, it } from 'vitest';
import { EXIT, USAGE } from './cli.js';
import { runCliCaptured } from './test-run-cli.js';

function run(args: string[], env: Record<string, string> = {}) {
  return runCliCaptured(args, { env, cwd: tmpdir() });
}

it('prints help with -h and exits 0', async () => {
  expect(await run(['-h'])).toEqual({ code: EXIT.OK, stdout: USAGE, stderr: '' });
});

it.each([
  [[], 'a command is required'],
  [['deploy'], 'unknown command "deploy"'],
  [['apply'], 'apply takes exactly one file'],
  [['apply', 'a.yaml', '--prune', '--create-only'], '--prune and --create-only exclude each other'],
  [['export', '--prune'], '--prune is not an option of "export"'],
  [['export', '--format', 'toml'], '--format must be yaml or json'],
  [['apply', 'a.yaml', '--force'], "Unknown option '--force'"],
])('answers %j with a usage error (exit 2)', async (args, message) => {
  const result = await run(args);
  expect(result.code).toBe(EXIT.USAGE);
  expect(result.stderr).toContain(message);
  expect(result.stderr).toContain('Usage: pnpm rules');
});

it('says which URL it could not reach (exit 1)', async () => {
  const file = join(tmpdir(), `sluice-cli-unreachable-${process.pid}.yaml`);
  await writeFile(file, 'rules: []\n');
  const url = `http://127.0.0.1:${await freePort()}`;
  const result = await run(['apply', file], { RULES_API_URL: url });
  expect(result.code).toBe(EXIT.ERROR);
  expect(result.stderr).toContain(`error: cannot reach the rules API at ${url}`);
});

it('reports a missing file (exit 1)', async () => {
  const result = await run(['apply', 'no-such-file.yaml']);
  expect(result.code).toBe(EXIT.ERROR);
  expect(result.stderr).toMatch(/no-such-file\.yaml: 1 problem\(s\)\n {2}\(file\): ENOENT/);
});
