/**
 * How the demo runs each service: the same entry files and environment variables (docs/configuration.md) that the
 * Docker images and docker-compose.yml use, so the demo exercises what production runs.
 */
import { fileURLToPath } from 'node:url';
import type { ServiceSpec } from './supervisor.js';

/** Each service's entry, relative to its package directory, for built output and for source. */
export const ENTRIES = {
  'rules-api': { pkg: 'apps/rules-api', built: 'dist/server.js', source: 'src/server.ts' },
  upstream: { pkg: 'apps/demo', built: 'dist/upstream.js', source: 'src/upstream.ts' },
  gateway: { pkg: 'apps/gateway', built: 'dist/server.js', source: 'src/server.ts' },
} as const;

export type ServiceName = keyof typeof ENTRIES;

/** The gateway asks the rules API for changes this often in the demo. */
export const DEMO_REFRESH_SECONDS = 2;
/** The same as a node-cron expression with seconds (`RULES_REFRESH`). */
export const DEMO_RULES_REFRESH = `*/${DEMO_REFRESH_SECONDS} * * * * *`;

export interface DemoPorts {
  gateway: number;
  admin: number;
  rulesApi: number;
  upstream: number;
}

export const DEFAULT_PORTS: DemoPorts = { gateway: 8080, admin: 9090, rulesApi: 8081, upstream: 3000 };

/** The variable that overrides each port (`0` = any free port). */
export const PORT_ENV: Record<keyof DemoPorts, string> = {
  gateway: 'DEMO_GATEWAY_PORT',
  admin: 'DEMO_ADMIN_PORT',
  rulesApi: 'DEMO_RULES_API_PORT',
  upstream: 'DEMO_UPSTREAM_PORT',
};

/**
 * Variables the demo sets itself, removed from what children inherit so a stray `PORT` or
 * `DATABASE_URL` in the user's shell cannot change what the demo runs (embedded defaults only).
 */
const OWNED_VARIABLES = [
  'PORT',
  'HOST',
  'ADMIN_PORT',
  'DATA_DIR',
  'DATABASE_URL',
  'ADMIN_TOKEN',
  'READ_TOKEN',
  'AUTH_DISABLED',
  'UPSTREAMS',
  'RULES_API_URL',
  'RULES_API_TOKEN',
  'RULES_REFRESH',
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'ANALYTICS_GATEWAYS',
  'LOG_LEVEL',
  'JWT_SECRET',
  'JWT_JWKS_URL',
  'JWT_ALGORITHMS',
  'JWT_ISSUER',
  'JWT_AUDIENCE',
  'CLIENT_KEY_SECRET',
  'GATEWAY_ADMIN_TOKEN',
];

export interface DemoSettings {
  /** repository root */
  root: string;
  /** run `src/*.ts` through tsx instead of `dist/*.js` */
  fromSource: boolean;
  /** where every service listens */
  host: string;
  ports: DemoPorts;
  dataDir: string;
  adminToken: string;
  readToken: string;
  /** JWT_SECRET and CLIENT_KEY_SECRET handed to the rules API and the gateway */
  jwtSecret: string;
  clientKeySecret: string;
  /** LOG_LEVEL handed to the rules API and the gateway */
  logLevel: string;
  env: Record<string, string | undefined>;
}

export function repositoryRoot(): string {
  // this file is apps/demo/{src,dist}/services.{ts,js}
  return fileURLToPath(new URL('../../../', import.meta.url));
}

/** `127.0.0.1` for a wildcard listen address: what a client on this machine connects to. */
export function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

export function serviceUrl(settings: DemoSettings, port: number): string {
  return `http://${reachableHost(settings.host)}:${port}`;
}

export function serviceSpec(name: ServiceName, settings: DemoSettings): ServiceSpec {
  const entry = ENTRIES[name];
  const inherited = Object.fromEntries(
    Object.entries(settings.env).filter(([key]) => !OWNED_VARIABLES.includes(key)),
  );
  const own: Record<string, string> = { HOST: settings.host };
  // the same on both, so explain verifies the demo's tokens and keys credentials as the gateway does
  const identity = { JWT_SECRET: settings.jwtSecret, CLIENT_KEY_SECRET: settings.clientKeySecret };
  const { ports } = settings;
  switch (name) {
    case 'rules-api':
      Object.assign(own, {
        PORT: String(ports.rulesApi),
        DATA_DIR: settings.dataDir,
        ADMIN_TOKEN: settings.adminToken,
        READ_TOKEN: settings.readToken,
        LOG_LEVEL: settings.logLevel,
        // no Redis in the demo: the rules API asks the gateway's admin port for top offenders
        ANALYTICS_GATEWAYS: serviceUrl(settings, ports.admin),
        ...identity,
      });
      break;
    case 'upstream':
      Object.assign(own, { PORT: String(ports.upstream) });
      break;
    case 'gateway':
      Object.assign(own, {
        PORT: String(ports.gateway),
        ADMIN_PORT: String(ports.admin),
        UPSTREAMS: `/=${serviceUrl(settings, ports.upstream)}`,
        RULES_API_URL: serviceUrl(settings, ports.rulesApi),
        // the gateway only reads rules: it gets the read-only token
        RULES_API_TOKEN: settings.readToken,
        RULES_REFRESH: DEMO_RULES_REFRESH,
        LOG_LEVEL: settings.logLevel,
        ...identity,
      });
      break;
  }
  const cwd = `${settings.root}${entry.pkg}`;
  const args = settings.fromSource
    ? ['--conditions=sluice-source', '--import', 'tsx', entry.source]
    : [entry.built];
  return { name, command: process.execPath, args, cwd, env: { ...inherited, ...own } };
}
