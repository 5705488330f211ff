/**
 * The decision core knows no transport: nothing it imports, directly or through the modules it
 * imports, is Fastify, Node's HTTP or TLS stack, a socket, an HTTP client or a Redis client. Front
 * doors (the proxy hook, explain, a WebSocket handshake) adapt to it, never the other way round.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const HERE = dirname(fileURLToPath(import.meta.url));
const SRC = join(HERE, '..');
const FORBIDDEN = /^(fastify|@fastify\/.*|undici|ioredis|node:(http|https|http2|tls|dgram))$/;
/** What the core may use of node:net: address parsing and matching, never a socket. */
const NET_ALLOWED = new Set(['isIP', 'isIPv4', 'isIPv6', 'BlockList']);

/** Every module reachable from `entry` by relative imports, with its package imports. */
function closure(entry: string): Map<string, { packages: string[]; net: string[] }> {
  const seen = new Map<string, { packages: string[]; net: string[] }>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    const text = readFileSync(file, 'utf8');
    const packages: string[] = [];
    const net: string[] = [];
    seen.set(file, { packages, net });
    for (const m of text.matchAll(/(?:import|export)\s+(type\s+)?(\{[^}]*\}|[\w*\s]+)\s+from\s+'([^']+)'/g)) {
      const [, typeOnly, names, from] = m;
      if (from!.startsWith('.')) {
        visit(join(dirname(file), from!.replace(/\.js$/, '.ts')));
        continue;
      }
      packages.push(from!);
      if (from === 'node:net' && !typeOnly) {
        for (const name of names!.replace(/[{}]/g, '').split(','))
          net.push(name.trim().replace(/^type\s+/, ''));
      }
    }
  };
  visit(entry);
  return seen;
}

describe('the decision core has no transport', () => {
  const modules = closure(join(HERE, 'index.ts'));

  it('reaches the limiter and the matcher (the walk follows imports)', () => {
    const names = [...modules.keys()].map((file) => relative(SRC, file));
    expect(names).toContain(join('decision', 'core.ts'));
    expect(names).toContain(join('rules', 'match.ts'));
  });

  it('imports no HTTP, socket, Fastify or Redis module, directly or not', () => {
    const wrong = [...modules].flatMap(([file, { packages }]) =>
      packages.filter((name) => FORBIDDEN.test(name)).map((name) => `${relative(SRC, file)}: ${name}`),
    );
    expect(wrong).toEqual([]);
  });

  it('uses node:net only to read addresses', () => {
    const wrong = [...modules].flatMap(([file, { net }]) =>
      net
        .filter((name) => name !== '' && !NET_ALLOWED.has(name))
        .map((name) => `${relative(SRC, file)}: ${name}`),
    );
    expect(wrong).toEqual([]);
  });
});
