/**
 * Applies the migrations and exits: 0 when the schema is up to date, 1 (with the reason on stderr)
 * otherwise. For a one-shot migration job; the server also migrates at start.
 */
import { ConfigError, loadConfig } from './config.js';
import { openDatabase } from './db/client.js';
import { migrateDatabase } from './db/migrate.js';

try {
  // Only the database settings matter here; tokens are the server's business.
  const config = loadConfig({ ...process.env, AUTH_DISABLED: 'true' });
  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    timeoutMs: config.dbTimeoutMs,
  });
  try {
    await migrateDatabase(database, { migrationsDir: config.migrationsDir });
  } finally {
    await database.close();
  }
  process.stdout.write(`${JSON.stringify({ level: 30, time: Date.now(), msg: 'migrations applied' })}\n`);
} catch (err) {
  const lines =
    err instanceof ConfigError ? err.problems : [err instanceof Error ? err.message : String(err)];
  for (const line of lines) process.stderr.write(`${line}\n`);
  process.exit(1);
}
