/**
 * The engine is the runtime front doors stand on, so it must not lean on any one of them: it imports
 * no HTTP framework and no HTTP module (a gRPC or JSON front door would drag them in), and the front
 * doors (apps/*) import the engine, never each other. The demo is no front door: it is the launcher
 * that starts all of them (and seeds rules with the CLI), so it alone may import the others.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '../../..');

function sourcesOf(dir: string): string[] {
  return (readdirSync(join(REPO, dir), { recursive: true }) as string[])
    .filter((file) => file.endsWith('.ts') && !file.includes('node_modules') && !file.startsWith('dist'))
    .map((file) => join(dir, file));
}

/** Every module specifier a file imports or re-exports (static and dynamic). */
function specifiersOf(file: string): string[] {
  const text = readFileSync(join(REPO, file), 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)].map((m) => m[1]!);
}

const FORBIDDEN_IN_ENGINE =
  /^(fastify|@fastify\/.*|node:http|node:https|node:http2|http|https|http2|undici|prom-client)$/;

describe('layers of the engine and its front doors', () => {
  it('the engine imports no HTTP framework, no HTTP module and no metrics library', () => {
    const sources = sourcesOf('packages/engine/src');
    expect(sources.length).toBeGreaterThan(5);
    const wrong = sources.flatMap((file) =>
      specifiersOf(file)
        .filter((specifier) => FORBIDDEN_IN_ENGINE.test(specifier))
        .map((specifier) => `${file} → ${specifier}`),
    );
    expect(wrong).toEqual([]);
  });

  it('the front doors import the engine, never each other', () => {
    const apps = readdirSync(join(REPO, 'apps'));
    expect(apps).toContain('gateway');
    const wrong: string[] = [];
    for (const app of apps.filter((name) => name !== 'demo')) {
      for (const file of sourcesOf(`apps/${app}/src`)) {
        for (const specifier of specifiersOf(file)) {
          const other = /^@sluice\/([a-z-]+)/.exec(specifier)?.[1];
          const reachesOut = /^(\.\.\/)+apps\//.test(specifier) || /\.\.\/\.\.\/\.\.\/apps\//.test(specifier);
          if ((other !== undefined && apps.includes(other) && other !== app) || reachesOut) {
            wrong.push(`${file} → ${specifier}`);
          }
        }
      }
    }
    expect(wrong).toEqual([]);
    const gateway = sourcesOf('apps/gateway/src').flatMap(specifiersOf);
    expect(gateway).toContain('@sluice/engine');
  });

  it('the engine does not reach into an app', () => {
    const wrong = sourcesOf('packages/engine/src').flatMap((file) =>
      specifiersOf(file)
        .filter(
          (specifier) =>
            /^@sluice\/(gateway|rules-api|cli|demo)\b/.test(specifier) || specifier.includes('apps/'),
        )
        .map((specifier) => `${file} → ${specifier}`),
    );
    expect(wrong).toEqual([]);
  });
});
