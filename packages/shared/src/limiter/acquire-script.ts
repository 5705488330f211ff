/**
 * The limiter's Lua script, assembled once at load time: acquire.lua with every algorithm's snippet
 * spliced in at its `-- @algorithms` line, so each algorithm's Lua lives in its own folder beside its
 * TypeScript twin. (The build copies the .lua files beside the compiled ones.)
 */
import { readFileSync } from 'node:fs';
import { ALGORITHM_LUA_FILES } from './algorithms/index.js';

const MARKER = '-- @algorithms';

function read(relative: string): string {
  return readFileSync(new URL(relative, import.meta.url), 'utf8');
}

function assemble(): string {
  const main = read('./acquire.lua');
  const at = main.indexOf(`\n${MARKER}\n`);
  if (at < 0) throw new Error(`acquire.lua has no "${MARKER}" line`);
  const snippets = ALGORITHM_LUA_FILES.map((file) => read(`./algorithms/${file}`)).join('\n');
  return main.slice(0, at + 1) + snippets + main.slice(at + 1 + MARKER.length);
}

/** The whole script every `RedisStore.acquire` runs (by EVALSHA). */
export const ACQUIRE_LUA: string = assemble();
