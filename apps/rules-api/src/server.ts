/**
 * Boots the rules API: config, app (migrations included), listen, graceful close on SIGTERM/SIGINT.
 * Exits 1 with one line per bad variable when the environment is wrong, and 1 when migrations fail.
 */
import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import { type Config, ConfigError, loadConfig } from './config.js';

/** How long in-flight requests get to finish after SIGTERM before the process exits anyway, ms. */
const SHUTDOWN_GRACE_MS = 10_000;

function fail(lines: string[]): never {
  for (const line of lines) process.stderr.write(`${line}\n`);
  process.exit(1);
}

let config: Config;
try {
  config = loadConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) fail(err.problems);
  throw err;
}

let app: Awaited<ReturnType<typeof buildApp>>;
try {
  app = await buildApp(config);
} catch (err) {
  const message = err instanceof Error ? err.message : String(err);
  // No logger yet when the database or the migrations fail: one JSON line like pino's, then exit 1.
  process.stdout.write(
    `${JSON.stringify({ level: 60, time: Date.now(), msg: 'startup failed', err: { message, code: (err as { code?: string }).code } })}\n`,
  );
  fail([`startup failed: ${message}`]);
}

if (config.authDisabled) {
  app.log.warn('AUTH_DISABLED=true: every request may read and change rules, without a token');
}
if (config.databaseUrl === undefined) {
  app.log.info(
    { dataDir: config.dataDir },
    'DATABASE_URL not set: using embedded PGlite (single process only)',
  );
}

closeWithGrace({ delay: SHUTDOWN_GRACE_MS }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'closing after an uncaught error');
  else app.log.info({ signal }, 'closing: finishing in-flight requests');
  await app.close();
});

try {
  await app.listen({ port: config.port, host: config.host });
} catch (err) {
  app.log.fatal({ err }, 'could not listen');
  await app.close().catch(() => undefined);
  process.exit(1);
}
