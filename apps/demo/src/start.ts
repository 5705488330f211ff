/**
 * `pnpm start`: the whole of Sluice on embedded defaults. Starts the rules API (PGlite under DATA_DIR)
 * and the demo upstream, creates the demo rules that are missing, starts the gateway (in-process
 * store), prints where everything is, and stops it all in reverse order on Ctrl-C or SIGTERM.
 * A service that dies on its own makes the demo stop the others and exit 1.
 */
import { mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { applyRules, RulesApiClient, readRulesFile } from '@sluice/cli';
import { banner } from './banner.js';
import { demoIdentities } from './identities.js';
import { formatChildLine, style } from './output.js';
import { choosePort } from './ports.js';
import {
  DEFAULT_PORTS,
  DEMO_REFRESH_SECONDS,
  type DemoPorts,
  type DemoSettings,
  PORT_ENV,
  repositoryRoot,
  serviceSpec,
  serviceUrl,
} from './services.js';
import { describeExit, type ExitStatus, type ServiceProcess, Supervisor } from './supervisor.js';
import { loadOrCreateTokens } from './tokens.js';

/** How long a service may take to become ready (PGlite's first start creates a database). */
const START_TIMEOUT_MS = 90_000;
/** How long a service gets to finish in-flight work after SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 10_000;
const DEMO_RULES_FILE = fileURLToPath(new URL('../demo-rules.yaml', import.meta.url));

class DemoError extends Error {
  readonly code = 'DEMO_FAILED';
}

const env = process.env;
const say = (text: string) => process.stdout.write(`${text}\n`);
const supervisor = new Supervisor(
  (name, line) => say(formatChildLine(name, line)),
  (service, status) =>
    void fail(new DemoError(`${service.name} ${describeExit(status)} unexpectedly (its output is above)`)),
);
let finishing = false;

async function fail(err: unknown): Promise<void> {
  if (finishing) return;
  finishing = true;
  process.exitCode = 1;
  say(style('red', `\nSluice demo failed: ${err instanceof Error ? err.message : String(err)}`));
  say('Stopping the other services…');
  await supervisor.stopAll(STOP_GRACE_MS);
  process.exit(1);
}

/** When the first stop signal came, ms since epoch. */
let stopSignalAt = 0;
/**
 * A signal this soon after the first is the same Ctrl-C arriving twice: the terminal sends it to
 * the demo and `pnpm start` forwards its own copy.
 */
const SAME_SIGNAL_MS = 1_000;

async function stop(signal: string): Promise<void> {
  if (finishing) {
    if (Date.now() - stopSignalAt < SAME_SIGNAL_MS) return;
    // a second Ctrl-C: do not wait any longer
    say('Killing the services without waiting.');
    supervisor.killAll();
    process.exit(130);
  }
  finishing = true;
  stopSignalAt = Date.now();
  say(`\n${signal}: stopping the gateway, the upstream and the rules API…`);
  await supervisor.stopAll(STOP_GRACE_MS);
  say('Stopped.');
  process.exit(0);
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void stop(signal));

function readPort(name: keyof DemoPorts): number {
  const raw = env[PORT_ENV[name]]?.trim();
  if (!raw) return DEFAULT_PORTS[name];
  if (!/^[0-9]+$/.test(raw) || Number(raw) > 65535) {
    throw new DemoError(
      `${PORT_ENV[name]} must be an integer from 0 to 65535 (0 = any free port), got ${raw}`,
    );
  }
  return Number(raw);
}

async function choosePorts(host: string): Promise<DemoPorts> {
  const ports = { ...DEFAULT_PORTS };
  const taken = new Set<number>();
  for (const name of Object.keys(ports) as Array<keyof DemoPorts>) {
    const wanted = readPort(name);
    if (wanted !== 0 && taken.has(wanted)) throw new DemoError(`${PORT_ENV[name]}=${wanted} is used twice`);
    let port = await choosePort(host, wanted, PORT_ENV[name]);
    // two "any free port" picks may come back equal: the port is only reserved once a service listens
    while (taken.has(port)) port = await choosePort(host, 0, PORT_ENV[name]);
    taken.add(port);
    ports[name] = port;
  }
  return ports;
}

async function waitUntilReady(service: ServiceProcess, url: string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (!service.running) {
      const status: ExitStatus = await service.exited;
      throw new DemoError(
        `${service.name} ${describeExit(status)} before it was ready (its output is above)`,
      );
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      throw new DemoError(`${service.name} was not ready at ${url} after ${START_TIMEOUT_MS / 1000} s`);
    }
    await sleep(150);
  }
}

/** Starts a service unless the demo is already stopping (Ctrl-C during start-up). */
function startService(name: Parameters<typeof serviceSpec>[0], settings: DemoSettings): ServiceProcess {
  if (supervisor.stopping) throw new DemoError('stopping');
  return supervisor.start(serviceSpec(name, settings));
}

async function main(): Promise<void> {
  const host = env.DEMO_HOST?.trim() || '127.0.0.1';
  const dataDir = resolve(env.DATA_DIR?.trim() || './.data');
  await mkdir(dataDir, { recursive: true });
  const tokens = await loadOrCreateTokens(dataDir, env);
  const settings: DemoSettings = {
    root: repositoryRoot(),
    fromSource: import.meta.url.endsWith('.ts'),
    host,
    ports: await choosePorts(host),
    dataDir,
    adminToken: tokens.adminToken,
    readToken: tokens.readToken,
    jwtSecret: tokens.jwtSecret,
    clientKeySecret: tokens.clientKeySecret,
    logLevel: env.LOG_LEVEL?.trim() || 'warn',
    env,
  };
  const { ports } = settings;
  const rulesApiUrl = serviceUrl(settings, ports.rulesApi);
  const upstreamUrl = serviceUrl(settings, ports.upstream);
  say(
    style(
      'bold',
      `Starting Sluice (data in ${dataDir}; services log at ${settings.logLevel} level and above)…`,
    ),
  );

  const rulesApi = startService('rules-api', settings);
  const upstream = startService('upstream', settings);
  await Promise.all([
    waitUntilReady(rulesApi, `${rulesApiUrl}/readyz`),
    waitUntilReady(upstream, `${upstreamUrl}/healthz`),
  ]);

  // Only missing demo rules are created: a restart keeps the rules (and any edits) it finds.
  const admin = new RulesApiClient({ url: rulesApiUrl, token: tokens.adminToken });
  const seeded = await applyRules(admin, await readRulesFile(DEMO_RULES_FILE), { createOnly: true });
  const problems = seeded.outcomes.filter((o) => o.status !== 'done');
  if (problems.length > 0) {
    throw new DemoError(
      `creating the demo rules failed: ${problems.map((p) => `${p.step.name}: ${'message' in p ? p.message : ''}`).join('; ')}`,
    );
  }
  const created = seeded.outcomes.map((o) => o.step.name);
  const present = seeded.plan.steps.filter(
    (s) => s.action === 'unchanged' || (s.action === 'keep' && s.reason === 'create-only'),
  );
  const seedSummary =
    created.length > 0
      ? `created ${created.join(', ')}${present.length > 0 ? `; ${present.length} rules already there` : ''}`
      : `${present.length} rules already there, kept as they are (${DEMO_RULES_FILE} has the originals)`;

  const gateway = startService('gateway', settings);
  await waitUntilReady(gateway, `${serviceUrl(settings, ports.admin)}/readyz`);

  const rules = await admin.listRules();
  const named = (name: string) => rules.find((r) => r.name === name);
  say(
    banner({
      gatewayUrl: serviceUrl(settings, ports.gateway),
      adminUrl: serviceUrl(settings, ports.admin),
      rulesApiUrl,
      upstreamUrl,
      adminToken: tokens.adminToken,
      tokensPath: tokens.path,
      dataDir,
      refreshSeconds: DEMO_REFRESH_SECONDS,
      seedSummary,
      perIpRule: named('demo-per-ip'),
      ordersRule: named('demo-orders'),
      partnerRule: named('demo-orders-partner'),
      accountRule: named('demo-account'),
      accountProRule: named('demo-account-pro'),
      identities: await demoIdentities(tokens.jwtSecret),
    }),
  );
}

main().catch((err) => {
  // after Ctrl-C or a crash during start-up, the failures of the steps still running are expected
  if (finishing || supervisor.stopping) return;
  void fail(err);
});
