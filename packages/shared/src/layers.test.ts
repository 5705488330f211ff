/**
 * rules/ and limiter/ are layered, not a loop: the rule format is built from the algorithm plug-ins
 * (rules/ imports limiter/), so nothing under limiter/ may reach rules/, directly or through another
 * folder. What both need (token amounts, durations, a limit's client, field errors) is in format/,
 * which imports neither. A loop would make either side impossible to load, test or replace alone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = dirname(fileURLToPath(import.meta.url));

/** The non-test TypeScript files under `folder`. */
function sources(folder: string): string[] {
  return readdirSync(join(SRC, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts') && !/\.test\.ts$/.test(entry.name))
    .map((entry) => join(entry.parentPath, entry.name))
    .filter((file) => !/test-[\w-]+\.ts$/.test(file));
}

/** The files `file` imports by relative path (type-only imports count: they tie the folders too). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [
    ...text.matchAll(/(?:import|export)\s+(?:type\s+)?(?:\{[^}]*\}|[\w*\s]+)\s+from\s+'(\.[^']+)'/g),
  ].map((m) => join(dirname(file), m[1]!.replace(/\.js$/, '.ts')));
}

/** The folder of src/ a file is in: `rules`, `limiter`, … */
function folderOf(file: string): string {
  return relative(SRC, file).split(sep)[0]!;
}

/** Every file reachable from `files` by relative imports, with the chain that reached it. */
function reach(files: string[]): Map<string, string[]> {
  const seen = new Map<string, string[]>();
  const queue: [file: string, chain: string[]][] = files.map((file) => [file, [relative(SRC, file)]]);
  for (let i = 0; i < queue.length; i++) {
    const [file, chain] = queue[i]!;
    if (seen.has(file)) continue;
    seen.set(file, chain);
    for (const next of importsOf(file)) queue.push([next, [...chain, relative(SRC, next)]]);
  }
  return seen;
}

describe('rules/ and limiter/ are layers, not a loop', () => {
  it('finds the imports it walks (rules/ does import limiter/)', () => {
    const direct = sources('rules')
      .flatMap(importsOf)
      .filter((file) => folderOf(file) === 'limiter');
    expect(direct.length).toBeGreaterThan(0);
  });

  it('nothing under limiter/ imports rules/, directly or through another folder', () => {
    const wrong = [...reach(sources('limiter'))]
      .filter(([file]) => folderOf(file) === 'rules')
      .map(([, chain]) => chain.join(' → '));
    expect(wrong).toEqual([]);
  });

  it('format/ imports neither', () => {
    const wrong = [...reach(sources('format'))]
      .map(([file]) => folderOf(file))
      .filter((folder) => folder !== 'format');
    expect(wrong).toEqual([]);
  });
});
