/**
 * The demo's bearer tokens and secrets: taken from `ADMIN_TOKEN` / `READ_TOKEN` / `JWT_SECRET` /
 * `CLIENT_KEY_SECRET` when set, otherwise made up on the first run and kept in
 * `<DATA_DIR>/demo-tokens.json` (mode 0600), so a restart keeps working with the token printed the
 * first time (and the JWTs printed then still verify, and credential digests stay the same).
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface DemoTokens {
  /** read and write access to the rules API */
  adminToken: string;
  /** read-only access; what the gateway uses */
  readToken: string;
  /** JWT_SECRET of the gateway and the rules API: the demo's HS256 tokens are signed with it */
  jwtSecret: string;
  /** CLIENT_KEY_SECRET of the gateway and the rules API */
  clientKeySecret: string;
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
    // 32 random bytes: HS256's key size, what JWT_SECRET asks at least
    jwtSecret: typeof saved.jwtSecret === 'string' ? saved.jwtSecret : randomBytes(32).toString('base64url'),
    clientKeySecret:
      typeof saved.clientKeySecret === 'string'
        ? saved.clientKeySecret
        : randomBytes(32).toString('base64url'),
  };
  if ((Object.keys(generated) as (keyof typeof generated)[]).some((key) => generated[key] !== saved[key])) {
    await writeFile(path, `${JSON.stringify(generated, null, 2)}\n`, { mode: 0o600 });
  }
  return {
    adminToken: env.ADMIN_TOKEN?.trim() || generated.adminToken,
    readToken: env.READ_TOKEN?.trim() || generated.readToken,
    jwtSecret: env.JWT_SECRET?.trim() || generated.jwtSecret,
    clientKeySecret: env.CLIENT_KEY_SECRET?.trim() || generated.clientKeySecret,
    path,
  };
}
