/**
 * Prints the rules API's OpenAPI document (what `GET /openapi.json` serves) to stdout, without a
 * database or a listening port: for linters and client generators (`.ci/rules-api-tools`).
 */
import { buildApp } from './app.js';
import { loadConfig } from './config.js';

// The document depends on no setting: a throwaway in-memory database, no token, no log.
const config = loadConfig({ AUTH_DISABLED: 'true', DATA_DIR: 'memory://', LOG_LEVEL: 'silent' });
const app = await buildApp(config, { skipMigrations: true });
try {
  await app.ready();
  process.stdout.write(`${JSON.stringify(app.swagger(), null, 2)}\n`);
} finally {
  await app.close();
}
