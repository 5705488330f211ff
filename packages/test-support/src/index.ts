export { freePort, sleep, waitFor } from './ports.js';
export { ADMIN_DATABASE_URL, createTestDatabase, databaseUrl, type TestDatabase } from './postgres.js';
export { REPO_ROOT, type StartRulesApiOptions, startRulesApi, type TestRulesApi } from './rules-api.js';
