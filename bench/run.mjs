// `pnpm bench [name…]`: runs every bench/<name>.ts one after another (each bounded in time, traffic
// only to 127.0.0.1) on the TypeScript sources, and prints their tables. A name filters.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wanted = process.argv.slice(2);
const entries = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && !f.startsWith('_'))
  .map((f) => f.slice(0, -3))
  .filter((name) => wanted.length === 0 || wanted.includes(name))
  .sort();

let failed = 0;
for (const name of entries) {
  console.log(`\n## ${name}\n`);
  const r = spawnSync(
    process.execPath,
    ['--conditions=sluice-source', '--import', 'tsx', join(here, `${name}.ts`)],
    { stdio: 'inherit', cwd: join(here, '..') },
  );
  if (r.status !== 0) {
    failed++;
    console.log(`(bench ${name} exited with ${r.status ?? r.signal})`);
  }
}
process.exit(failed > 0 ? 1 : 0);
