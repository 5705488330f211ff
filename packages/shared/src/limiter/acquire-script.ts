/**
 * The limiter's Lua, assembled once at load time: acquire.lua with every algorithm's snippet spliced
 * in at its `-- @algorithms` line, so each algorithm's Lua lives in its own folder beside its
 * TypeScript twin (the build copies the .lua files beside the compiled ones). The same text runs in
 * two forms: a Redis Function library (Redis >= 7: loaded once per node, its setup run once) and an
 * EVALSHA script (Redis 5 and 6, or where the library cannot be loaded: the whole text runs per call).
 */
import { createHash } from 'node:crypto';
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

/** acquire.lua and its snippets: everything but how a call enters it (its `run(keys, argv)`). */
const BODY = assemble();

/**
 * This text's version: a library and its function are named after it, so that gateways of different
 * versions (a rolling upgrade) each call their own on a shared Redis.
 */
const VERSION = createHash('sha1').update(BODY).digest('hex').slice(0, 12);

/** The script every `RedisStore` call runs by EVALSHA where it does not call the library. */
export const ACQUIRE_LUA: string = `local CALL_KEYS, CALL_ARGV = KEYS, ARGV\n${BODY}\nreturn run(CALL_KEYS, CALL_ARGV)\n`;

/** The Redis Function library's name (`FUNCTION LIST LIBRARYNAME sluice_`). */
export const ACQUIRE_LIBRARY_NAME = `sluice_${VERSION}`;

/** The function the library registers: FCALL it with the script's KEYS and ARGV. */
export const ACQUIRE_FUNCTION = `sluice_acquire_${VERSION}`;

/** The library as `FUNCTION LOAD` takes it. */
export const ACQUIRE_LIBRARY: string = `#!lua name=${ACQUIRE_LIBRARY_NAME}\n${BODY}\nredis.register_function('${ACQUIRE_FUNCTION}', run)\n`;
