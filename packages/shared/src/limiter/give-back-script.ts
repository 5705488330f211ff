/**
 * The give-back script (give-back.lua, Redis Cluster only), assembled once at load time: acquire.lua's
 * helpers (everything above its `-- @algorithms` line), every algorithm's snippet, then give-back.lua,
 * so that a give-back reads and writes states with the algorithms' own arithmetic.
 *
 * Interim: the lifecycle work's "settle" operation of acquire.lua replaces it (see give-back.lua).
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
  return `${main.slice(0, at + 1)}${snippets}\n${read('./give-back.lua')}`;
}

/** The whole script a cross-slot give-back runs (by EVALSHA). */
export const GIVE_BACK_LUA: string = assemble();
