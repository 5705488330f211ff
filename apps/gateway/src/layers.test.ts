/**
 * The gateway's folders are its layers (docs/gateway.md, "Layout"), lowest first:
 *
 *   config/ → telemetry/ → http/ → admin/ → app.ts, server.ts
 *
 * (the rules source, the limiter and the offenders are the engine's: packages/engine)
 *
 * A module imports only from its own folder or a lower layer: the limiter never reaches into the
 * proxy, the proxy never into the admin port, nothing into app.ts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = dirname(fileURLToPath(import.meta.url));
const LAYER: Record<string, number> = {
  config: 0,
  telemetry: 1,
  http: 3,
  admin: 4,
  '.': 5,
};

const sources = (readdirSync(SRC, { recursive: true }) as string[]).filter(
  (file) => file.endsWith('.ts') && !file.endsWith('.test.ts'),
);

function folderOf(file: string): string {
  const first = file.split(/[\\/]/)[0]!;
  return file.includes('/') || file.includes('\\') ? first : '.';
}

/** Every relative import of a file, as a path relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  return [...text.matchAll(/from '(\.[^']+)'/g)].map((m) =>
    normalize(relative(SRC, join(SRC, dirname(file), m[1]!))),
  );
}

describe('layers of apps/gateway/src', () => {
  it('every source lives in a known layer', () => {
    expect(sources.length).toBeGreaterThan(15);
    expect(sources.map(folderOf).filter((folder) => !(folder in LAYER))).toEqual([]);
  });

  it('no import runs from a lower layer to a higher one, nor between layers of the same rank', () => {
    const wrong: string[] = [];
    for (const file of sources) {
      const from = folderOf(file);
      for (const target of importsOf(file)) {
        const to = folderOf(target);
        if (to === from) continue;
        if (LAYER[to]! >= LAYER[from]!) wrong.push(`${file} → ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("no per-request state is hung on Node's objects under a symbol (one context: request.sluice)", () => {
    const symbols = sources.filter((file) => /Symbol\(/.test(readFileSync(join(SRC, file), 'utf8')));
    expect(symbols).toEqual([]);
  });
});
