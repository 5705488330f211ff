export { freePort, sleep, waitFor } from './ports.js';
export { ADMIN_DATABASE_URL, createTestDatabase, databaseUrl, type TestDatabase } from './postgres.js';
export {
  type ClusterNode,
  type ClusterNodeState,
  type RedisCluster,
  type StartRedisClusterOptions,
  startRedisCluster,
} from './redis-cluster.js';
export { REPO_ROOT, type StartRulesApiOptions, startRulesApi, type TestRulesApi } from './rules-api.js';
