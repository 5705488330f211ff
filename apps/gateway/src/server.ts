/**
 * Boot only: environment → config (one line per bad variable, exit 1), build, listen, and on
 * SIGTERM/SIGINT stop taking requests and let in-flight ones finish (up to SHUTDOWN_TIMEOUT_MS; then
 * the gateway closes what is left, WebSockets with 1001, and gives its slots back).
 */
import closeWithGrace from 'close-with-grace';
import { buildGateway, SHUTDOWN_CLOSE_MS } from './app.js';
import { ConfigError, type GatewayConfig, loadConfig } from './config/config.js';

let config: GatewayConfig;
try {
  config = loadConfig(process.env);
} catch (error) {
  if (error instanceof ConfigError) {
    // One plain line per bad variable, like the rules API: there is no logger before a config.
    for (const problem of error.problems) process.stderr.write(`${problem}\n`);
    process.exit(1);
  }
  throw error;
}

const gateway = buildGateway(config);
const log = gateway.proxy.log;

closeWithGrace({ delay: config.shutdownTimeoutMs + SHUTDOWN_CLOSE_MS }, async ({ signal, err }) => {
  if (err) log.error({ err }, 'stopping after an unexpected error');
  else log.info({ signal }, 'stopping: finishing in-flight requests');
  await gateway.close();
  log.info('stopped');
});

try {
  const { proxyUrl, adminUrl } = await gateway.start();
  log.info(
    { proxy: proxyUrl, admin: adminUrl, upstreams: config.upstreams, rulesApi: config.rulesApiUrl },
    'gateway listening',
  );
} catch (error) {
  log.fatal({ err: error }, 'gateway failed to start');
  await gateway.close().catch(() => {});
  process.exit(1);
}
