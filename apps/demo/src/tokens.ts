/**
 * The demo's bearer tokens: taken from `ADMIN_TOKEN` / `READ_TOKEN` when set, otherwise made up on the
 * first run and kept in `<DATA_DIR>/demo-tokens.json` (mode 0600), so a restart keeps working with the
 * token printed the first time.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface DemoTokens {
  /** read and write access to the rules API */
  adminToken: string;
  /** read-only access; what the gateway uses */
  readToken: string;
  /** where generated tokens are kept */
  path: string;
}

export const TOKENS_FILE = 'demo-tokens.json';

function newToken(prefix: string): string {
  return `${prefix}_${randomBytes(18).toString('base64url')}`;
}

export async function loadOrCreateTokens(
  dataDir: string,
  env: Record<string, string | undefined>,
): Promise<DemoTokens> {
  const path = join(dataDir, TOKENS_FILE);
  let saved: Partial<DemoTokens> = {};
  try {
    saved = JSON.parse(await readFile(path, 'utf8')) as Partial<DemoTokens>;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new Error(`${path} could not be read (${(err as Error).message}); delete it to make new tokens`);
    }
  }
  const generated = {
    adminToken: typeof saved.adminToken === 'string' ? saved.adminToken : newToken('admin'),
    readToken: typeof saved.readToken === 'string' ? saved.readToken : newToken('read'),
  };
  if (generated.adminToken !== saved.adminToken || generated.readToken !== saved.readToken) {
    await writeFile(path, `${JSON.stringify(generated, null, 2)}\n`, { mode: 0o600 });
  }
  return {
    adminToken: env.ADMIN_TOKEN?.trim() || generated.adminToken,
    readToken: env.READ_TOKEN?.trim() || generated.readToken,
    path,
  };
}
