// The servers a gateway bench runs against, started the same way by every bench: a private
// redis-server, the upstream, the bare @fastify/http-proxy, the rules API (its own data directory) and
// gateways, each pinned to SERVER_CPU, while the bench itself (the load generator) re-executes pinned to
// CPU 0, so neither side steals the other's core on a 2-core machine. Redis is a server too: it stays
// on SERVER_CPU, so the gateway pays for its store on the same core the bare proxy has to itself.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, httpOk, type Started, startPinned } from './processes.js';

export const SERVER_CPU = '1';
export const ADMIN_TOKEN = 'bench-admin-token';
const QUIET = { LOG_LEVEL: 'warn', NODE_ENV: 'production' };

/**
 * Re-executes this process once under `taskset -c 0` with `nodeFlags` and exits with the child's
 * status; returns only in the pinned child. The default young generation is large enough that the
 * client's own scavenges (about 1 ms each) are rare: they would otherwise add a millisecond to 1% of the
 * open-loop requests, the very percentile measured.
 */
export function pinSelf(nodeFlags: readonly string[] = ['--max-semi-space-size=64']): void {
  if (process.env.SLUICE_BENCH_PINNED) return;
  const r = spawnSync(
    'taskset',
    ['-c', '0', process.execPath, ...nodeFlags, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: 'inherit', env: { ...process.env, SLUICE_BENCH_PINNED: '1' } },
  );
  process.exit(r.status ?? 1);
}

/** Command prefixes for the Node servers. */
export interface NodeCommands {
  /** TypeScript sources through tsx (upstream, rules API) */
  tsx: string[];
  /** the bare proxy: tsx, CPU-profiled when a profile directory is given */
  profiledTsx: string[];
  /**
   * The gateway runs its built output, as in production (`pnpm bench` builds first): tsx-transpiled
   * sources carry name-keeping helpers that cost per object and would skew the comparison.
   */
  gateway: string[];
}

export function nodeCommands(serverFlags: readonly string[], profileDir: string | undefined): NodeCommands {
  const profile = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const tsx = [process.execPath, ...serverFlags, '--conditions=sluice-source', '--import', 'tsx'];
  return {
    tsx,
    profiledTsx: profileDir ? [process.execPath, ...profile, ...tsx.slice(1)] : tsx,
    gateway: [process.execPath, ...serverFlags, ...profile],
  };
}

/** BENCH_SERVER_NODE_FLAGS (extra node flags for every Node server) and BENCH_CPU_PROF (profile dir). */
export function nodeCommandsFromEnv(): NodeCommands {
  return nodeCommands(
    (process.env.BENCH_SERVER_NODE_FLAGS ?? '').split(' ').filter(Boolean),
    process.env.BENCH_CPU_PROF,
  );
}

export interface Server extends Started {
  port: number;
  /** http://127.0.0.1:<port> */
  url: string;
}

/** Counters from the Redis `INFO`, read around a measured stretch. */
export interface RedisCounters {
  /** script calls so far: EVALSHA and FCALL (INFO commandstats) */
  evalsha: number;
  /**
   * data commands so far: every command INFO commandstats counts (those a script runs included)
   * except the script calls themselves and the bench's own INFO
   */
  commands: number;
  /** socket reads so far (INFO stats total_reads_processed) */
  reads: number;
}

/** Commands that carry no limiter work: script calls (their inner commands count), the bench's own INFO, connection chatter. */
const NOT_DATA_COMMANDS = new Set([
  'evalsha',
  'eval',
  'evalsha_ro',
  'eval_ro',
  'fcall',
  'fcall_ro',
  'function',
  'info',
  'ping',
  'client',
  'hello',
  'select',
  'script',
  'command',
  'config',
  'cluster',
]);

export interface RedisServer extends Server {
  counters(): Promise<RedisCounters>;
}

export interface Gateway extends Server {
  adminPort: number;
  adminUrl: string;
}

/** Starts pinned servers and stops them all, in reverse order, with `stop()`. */
export class Stack {
  readonly dataDir = mkdtempSync(join(tmpdir(), 'sluice-bench-'));
  private readonly started: Started[] = [];
  private readonly clients: Redis[] = [];

  constructor(private readonly node: NodeCommands) {}

  private async start(
    name: string,
    cmd: string[],
    env: Record<string, string>,
    ready: (port: number) => Promise<boolean>,
  ): Promise<Server> {
    const port = await freePort();
    const started = await startPinned(name, SERVER_CPU, cmd, { PORT: String(port), ...env }, () =>
      ready(port),
    );
    this.started.push(started);
    return { ...started, port, url: `http://127.0.0.1:${port}` };
  }

  /** Redis, the upstream, the bare proxy in front of it and the rules API, in that order. */
  async startBase(): Promise<{ redis: RedisServer; upstream: Server; bare: Server; rulesApi: Server }> {
    const redis = await this.startRedis();
    const upstream = await this.startUpstream();
    const bare = await this.startBareProxy(upstream.url);
    const rulesApi = await this.startRulesApi();
    return { redis, upstream, bare, rulesApi };
  }

  /**
   * A private redis-server. `callgrindDir`: run it under valgrind's callgrind, its counts dumped there
   * (callgrind.ts reads them): instructions, nearly the same for the same work whatever else the machine does.
   */
  async startRedis(options: { callgrindDir?: string } = {}): Promise<RedisServer> {
    const port = await freePort();
    const underCallgrind = options.callgrindDir
      ? ['valgrind', '--tool=callgrind', `--callgrind-out-file=${options.callgrindDir}/redis.%p`]
      : [];
    const started = await startPinned(
      'redis',
      SERVER_CPU,
      [
        ...underCallgrind,
        'redis-server',
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
      ],
      {},
      async () => {
        const c = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0 });
        c.on('error', () => {});
        try {
          await c.connect();
          return (await c.ping()) === 'PONG';
        } finally {
          c.disconnect();
        }
      },
    );
    this.started.push(started);
    let client: Redis | undefined;
    return {
      ...started,
      port,
      url: `redis://127.0.0.1:${port}`,
      counters: async () => {
        if (!client) {
          client = new Redis({ port });
          this.clients.push(client);
        }
        const [commands, stats] = await Promise.all([client.info('commandstats'), client.info('stats')]);
        let data = 0;
        for (const [, name, calls] of commands.matchAll(/^cmdstat_([a-z_|]+):calls=(\d+)/gm)) {
          if (!NOT_DATA_COMMANDS.has(name!.split('|')[0]!)) data += Number(calls);
        }
        return {
          evalsha:
            Number(/cmdstat_evalsha:calls=(\d+)/.exec(commands)?.[1] ?? 0) +
            Number(/cmdstat_fcall:calls=(\d+)/.exec(commands)?.[1] ?? 0),
          commands: data,
          reads: Number(/total_reads_processed:(\d+)/.exec(stats)?.[1] ?? 0),
        };
      },
    };
  }

  startUpstream(): Promise<Server> {
    return this.start('upstream', [...this.node.tsx, 'bench/_lib/upstream.ts'], {}, (port) =>
      httpOk(`http://127.0.0.1:${port}/`),
    );
  }

  startBareProxy(upstreamUrl: string): Promise<Server> {
    return this.start(
      'bare proxy',
      [...this.node.profiledTsx, 'bench/_lib/bare-proxy.ts'],
      { UPSTREAM_URL: upstreamUrl },
      (port) => httpOk(`http://127.0.0.1:${port}/`),
    );
  }

  /** @fastify/http-proxy behind the plain @fastify/rate-limit plugin on `redisUrl` (the yardstick). */
  startRateLimitedProxy(upstreamUrl: string, redisUrl: string): Promise<Server> {
    return this.start(
      'rate-limited proxy',
      [...this.node.tsx, 'bench/_lib/rate-limited-proxy.ts'],
      { UPSTREAM_URL: upstreamUrl, REDIS_URL: redisUrl },
      (port) => httpOk(`http://127.0.0.1:${port}/`),
    );
  }

  startRulesApi(): Promise<Server> {
    return this.start(
      'rules API',
      [...this.node.tsx, 'apps/rules-api/src/server.ts'],
      { ...QUIET, HOST: '127.0.0.1', DATA_DIR: this.dataDir, ADMIN_TOKEN },
      (port) => httpOk(`http://127.0.0.1:${port}/readyz`),
    );
  }

  /** A gateway in front of `upstreamUrl` with its rules from `rulesUrl`; `env` adds the store and more. */
  async startGateway(
    name: string,
    upstreamUrl: string,
    rulesUrl: string,
    env: Record<string, string>,
    /** the built server to run: this checkout's by default, another build (a baseline) when given */
    serverJs = 'apps/gateway/dist/server.js',
  ): Promise<Gateway> {
    const adminPort = await freePort();
    const started = await this.start(
      name,
      [...this.node.gateway, serverJs],
      {
        ...QUIET,
        HOST: '127.0.0.1',
        ADMIN_PORT: String(adminPort),
        UPSTREAMS: `/=${upstreamUrl}`,
        RULES_API_URL: rulesUrl,
        RULES_API_TOKEN: ADMIN_TOKEN,
        ...env,
      },
      () => httpOk(`http://127.0.0.1:${adminPort}/readyz`),
    );
    return { ...started, adminPort, adminUrl: `http://127.0.0.1:${adminPort}` };
  }

  /**
   * BENCH_BASELINE_GATEWAY=<another build's apps/gateway/dist/server.js>: that build's gateway beside
   * this one, on the same Redis under its own key prefix, so a bench runs both in the same rounds (a
   * before/after in one run); undefined when the variable is not set.
   */
  async startBaselineGateway(
    upstreamUrl: string,
    rulesUrl: string,
    redisUrl: string,
  ): Promise<Gateway | undefined> {
    const serverJs = process.env.BENCH_BASELINE_GATEWAY;
    if (!serverJs) return undefined;
    return await this.startGateway(
      'baseline gateway',
      upstreamUrl,
      rulesUrl,
      { REDIS_URL: redisUrl, REDIS_KEY_PREFIX: 'baseline:' },
      serverJs,
    );
  }

  /** Disconnects its Redis clients, stops every server (the last started first) and removes the rules API's data directory. */
  async stop(): Promise<void> {
    for (const c of this.clients) c.disconnect();
    for (const s of this.started.reverse()) await s.stop();
    this.started.length = 0;
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Creates each rule through the rules API; throws on anything but 201. */
export async function createRules(
  rulesUrl: string,
  rules: readonly ({ name: string } & Record<string, unknown>)[],
): Promise<void> {
  for (const rule of rules) {
    const res = await fetch(`${rulesUrl}/rules`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(rule),
    });
    if (res.status !== 201) throw new Error(`creating ${rule.name}: ${res.status} ${await res.text()}`);
  }
}
