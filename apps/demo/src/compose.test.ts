/**
 * There is no Docker engine where the tests run, so this checks that docker-compose.yml and the
 * Dockerfile run what the tests run: the same entry files as the demo, the variables each process
 * actually reads (docs/configuration.md), build targets that exist, and a seed file that is in the image.
 * (`docker-compose config` checks the syntax in CI.)
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ENTRIES, repositoryRoot } from './services.js';

const root = repositoryRoot();
const read = (path: string) => readFileSync(`${root}${path}`, 'utf8');

interface ComposeService {
  build?: { context: string; target: string };
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  restart?: string;
}
const compose = parse(read('docker-compose.yml'), { merge: true }) as {
  services: Record<string, ComposeService>;
};
const services = compose.services;

/** `{ target: { cmd, entrypoint, copies } }` from the Dockerfile's stages. */
function dockerStages(): Record<string, { cmd?: string[]; entrypoint?: string[]; text: string }> {
  const stages: Record<string, { cmd?: string[]; entrypoint?: string[]; text: string }> = {};
  let current: { cmd?: string[]; entrypoint?: string[]; text: string } | undefined;
  for (const line of read('Dockerfile').split('\n')) {
    const from = /^FROM\s+\S+\s+AS\s+(\S+)/i.exec(line);
    if (from) {
      current = { text: '' };
      stages[from[1]!] = current;
      continue;
    }
    if (!current) continue;
    current.text += `${line}\n`;
    const exec = /^(CMD|ENTRYPOINT)\s+(\[.*\])\s*$/.exec(line);
    if (exec) current[exec[1] === 'CMD' ? 'cmd' : 'entrypoint'] = JSON.parse(exec[2]!) as string[];
  }
  return stages;
}
const stages = dockerStages();

/** Whether a process reads a variable: its config module declares it (`NAME: env…(` in its table). */
function variablesRead(app: 'rules-api' | 'gateway'): (name: string) => boolean {
  let source = read(app === 'gateway' ? 'apps/gateway/src/config/config.ts' : `apps/${app}/src/config.ts`);
  // the identity variables both processes spread in from the shared declaration
  if (source.includes('...IDENTITY_ENV,')) source += read('packages/shared/src/identity/identity-env.ts');
  return (name) => new RegExp(`^\\s+${name}: (env[A-Z]\\w*\\(|LOG_LEVEL_VAR,)`, 'm').test(source);
}

/** Port of a `fetch('http://127.0.0.1:<port>/…')` healthcheck. */
function healthPort(service: ComposeService): string | undefined {
  return /127\.0\.0\.1:(\d+)\//.exec(service.healthcheck?.test.join(' ') ?? '')?.[1];
}

describe('Dockerfile', () => {
  it('has a target per process running the entry the demo and the tests run', () => {
    expect(stages['rules-api']?.cmd).toEqual(['node', ENTRIES['rules-api'].built]);
    expect(stages.gateway?.cmd).toEqual(['node', ENTRIES.gateway.built]);
    expect(stages.demo?.cmd).toEqual(['node', ENTRIES.upstream.built]);
    expect(stages.cli?.entrypoint).toEqual(['node', 'dist/rules.js']);
    const cliPackage = JSON.parse(read('apps/cli/package.json')) as { scripts: Record<string, string> };
    expect(cliPackage.scripts.start).toBe('node dist/rules.js');
  });

  it('runs every process as the unprivileged node user', () => {
    for (const target of ['rules-api', 'gateway', 'demo', 'cli'])
      expect(stages[target]?.text).toMatch(/^USER node$/m);
  });

  it('ships the migrations where the rules API is told to find them', () => {
    expect(stages.build?.text).toMatch(/cp -R migrations \/out\/rules-api\/migrations/);
    expect(stages['rules-api']?.text).toMatch(/MIGRATIONS_DIR=\/app\/migrations/);
    expect(variablesRead('rules-api')('MIGRATIONS_DIR')).toBe(true);
  });
});

describe('docker-compose.yml', () => {
  it('builds each service from a Dockerfile target that exists', () => {
    for (const [name, service] of Object.entries(services)) {
      if (!service.build) continue;
      expect(Object.keys(stages), name).toContain(service.build.target);
    }
  });

  it('sets only variables the processes read, and every required one', () => {
    const rulesApiReads = variablesRead('rules-api');
    const rulesApiEnv = Object.keys(services['rules-api']!.environment!);
    expect(rulesApiEnv.filter((v) => !rulesApiReads(v))).toEqual([]);
    expect(rulesApiEnv).toEqual(expect.arrayContaining(['DATABASE_URL', 'ADMIN_TOKEN', 'READ_TOKEN']));

    const gatewayReads = variablesRead('gateway');
    for (const name of ['gateway-a', 'gateway-b']) {
      const env = services[name]!.environment!;
      expect(
        Object.keys(env).filter((v) => !gatewayReads(v)),
        name,
      ).toEqual([]);
      expect(Object.keys(env), name).toEqual(
        expect.arrayContaining(['UPSTREAMS', 'RULES_API_URL', 'REDIS_URL']),
      );
    }
  });

  it('runs two gateways on one Redis, on different host ports, with the read-only token', () => {
    const a = services['gateway-a']!;
    const b = services['gateway-b']!;
    expect(a.environment).toEqual(b.environment);
    expect(a.environment!.REDIS_URL).toBe('redis://redis:6379');
    expect(a.environment!.RULES_API_TOKEN).toBe(services['rules-api']!.environment!.READ_TOKEN);
    expect(new Set([...a.ports!, ...b.ports!]).size).toBe(a.ports!.length + b.ports!.length);
    expect(a.environment!.UPSTREAMS).toBe(`/=http://upstream:${services.upstream!.environment!.PORT}`);
  });

  it('checks health on the ports the services listen on, and starts in dependency order', () => {
    expect(healthPort(services['rules-api']!)).toBe(services['rules-api']!.environment!.PORT);
    expect(healthPort(services.upstream!)).toBe(services.upstream!.environment!.PORT);
    expect(healthPort(services['gateway-a']!)).toBe(services['gateway-a']!.environment!.ADMIN_PORT);
    expect(services['rules-api']!.depends_on).toEqual({ postgres: { condition: 'service_healthy' } });
    expect(services['gateway-a']!.depends_on).toMatchObject({
      'rules-api': { condition: 'service_healthy' },
      redis: { condition: 'service_healthy' },
    });
    expect(services.postgres!.healthcheck!.test.join(' ')).toContain('pg_isready');
    expect(services.redis!.healthcheck!.test).toEqual(['CMD', 'redis-cli', 'ping']);
  });

  it('seeds the demo rules once with the admin token, from a file the image holds', () => {
    const seed = services.seed!;
    expect(seed.build!.target).toBe('cli');
    expect(seed.restart).toBe('no');
    expect(seed.command).toEqual(['apply', '--create-only', 'demo-rules.yaml']);
    expect(seed.environment!.RULES_API_TOKEN).toBe(services['rules-api']!.environment!.ADMIN_TOKEN);
    expect(stages.build?.text).toMatch(/cp apps\/demo\/demo-rules\.yaml \/out\/cli\/demo-rules\.yaml/);
  });
});
