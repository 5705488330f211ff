/**
 * The root entry (`@sluice/shared`) must not load ioredis: the rules API and the CLI import it and
 * never talk to Redis. The Redis store lives behind the `@sluice/shared/redis` subpath. Checked in a
 * child process (a fresh module graph), with the subpath as the control that the check sees ioredis.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

/** The modules under node_modules/ioredis that importing `specifier` loads, seen from a new process. */
async function ioredisModulesLoadedBy(specifier: string): Promise<number> {
  const script = `
    import { createRequire } from 'node:module';
    await import(${JSON.stringify(specifier)});
    const loaded = Object.keys(createRequire(import.meta.url).cache);
    console.log(loaded.filter((path) => path.includes('/node_modules/ioredis/')).length);
  `;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--conditions=sluice-source', '--import', 'tsx', '--input-type=module', '-e', script],
    { cwd: packageDir },
  );
  return Number(stdout.trim());
}

describe('package entries', () => {
  it('the root entry does not load ioredis; the redis subpath does', async () => {
    const [root, redis] = await Promise.all([
      ioredisModulesLoadedBy('@sluice/shared'),
      ioredisModulesLoadedBy('@sluice/shared/redis'),
    ]);
    expect(root).toBe(0);
    expect(redis).toBeGreaterThan(0);
  });
});
