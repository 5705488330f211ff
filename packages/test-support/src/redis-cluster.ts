/**
 * A real Redis Cluster for tests: 3 masters with 1 replica each, `redis-server --cluster-enabled yes`
 * on free ports of 127.0.0.1, joined with `redis-cli --cluster create`. Needs only `redis-server` and
 * `redis-cli` (7.x) on PATH. Everything it starts is killed and its directory removed by `close()`.
 *
 * `cluster-node-timeout` is small (default 2000 ms) so that a replica takes over a killed master in a
 * few seconds, and `cluster-require-full-coverage no` so that the other masters keep answering while
 * one is down (the deployment docs/redis-cluster.md recommends).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, waitFor } from './ports.js';

const run = promisify(execFile);
const HOST = '127.0.0.1';

export interface ClusterNode {
  readonly port: number;
  /** `host:port` */
  readonly address: string;
}

/** One line of `CLUSTER NODES`, as far as tests need it. */
export interface ClusterNodeState {
  id: string;
  port: number;
  role: 'master' | 'replica';
  /** the master's id, for a replica */
  masterId: string | undefined;
  failed: boolean;
  /** slot ranges `[first, last]` a master serves */
  slots: [number, number][];
}

export interface RedisCluster {
  /** every node started (masters first, as created) */
  readonly nodes: readonly ClusterNode[];
  /** `REDIS_CLUSTER_NODES`: every node's `host:port`, comma-separated */
  readonly seeds: string;
  /** `redis-cli -p <port> <args…>` against one node; its stdout, trimmed */
  cli(port: number, ...args: string[]): Promise<string>;
  /** `CLUSTER NODES` as seen by `port` (default: any live node) */
  topology(port?: number): Promise<ClusterNodeState[]>;
  /** the port of the master serving `slot` now */
  masterOf(slot: number): Promise<number>;
  /** SIGKILLs one node; `restart(port)` brings it back (it rejoins from its nodes file) */
  kill(port: number): Promise<void>;
  restart(port: number): Promise<void>;
  /** resolves when every live node reports `cluster_state:ok` and agrees every slot has a live master */
  waitHealthy(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface StartRedisClusterOptions {
  /** default 2000: how long before a silent master is failed over */
  nodeTimeoutMs?: number;
  /** default 30000: the whole start, or it fails (and cleans up) */
  startTimeoutMs?: number;
}

/** A port free with its cluster bus port (port + 10000) free too. */
async function freeClusterPort(taken: Set<number>): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await freePort();
    if (port > 55_000 || taken.has(port) || taken.has(port + 10_000)) continue;
    if (await canListen(port + 10_000)) return port;
  }
  throw new Error('no free port pair (port, port + 10000) for a Redis Cluster node');
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, HOST, () => server.close(() => resolve(true)));
  });
}

export async function startRedisCluster(options: StartRedisClusterOptions = {}): Promise<RedisCluster> {
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 2_000;
  const startTimeoutMs = options.startTimeoutMs ?? 30_000;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-redis-cluster-'));
  const children = new Map<number, ChildProcess>();
  const taken = new Set<number>();
  const nodes: ClusterNode[] = [];
  for (let i = 0; i < 6; i++) {
    const port = await freeClusterPort(taken);
    taken.add(port);
    taken.add(port + 10_000);
    nodes.push({ port, address: `${HOST}:${port}` });
  }

  const launch = (port: number) => {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        HOST,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(dir, `nodes-${port}.conf`),
        '--cluster-node-timeout',
        String(nodeTimeoutMs),
        '--cluster-require-full-coverage',
        'no',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
      ],
      { stdio: 'ignore' },
    );
    children.set(port, child);
  };

  const cli = async (port: number, ...args: string[]): Promise<string> => {
    const { stdout } = await run('redis-cli', ['-h', HOST, '-p', String(port), ...args], { timeout: 10_000 });
    return stdout.trim();
  };

  const kill = async (port: number) => {
    const child = children.get(port);
    children.delete(port);
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  };

  const liveNode = () => {
    const port = nodes.find((node) => children.has(node.port))?.port;
    if (port === undefined) throw new Error('no node of the cluster is running');
    return port;
  };

  const topology = async (port = liveNode()): Promise<ClusterNodeState[]> =>
    (await cli(port, 'CLUSTER', 'NODES'))
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map(parseNodeLine);

  const close = async () => {
    await Promise.all([...children.keys()].map(kill));
    rmSync(dir, { recursive: true, force: true });
  };

  const waitHealthy = async (timeoutMs = 20_000) => {
    await waitFor(
      async () => {
        for (const port of children.keys()) {
          if (!(await cli(port, 'CLUSTER', 'INFO')).includes('cluster_state:ok')) return false;
        }
        const masters = (await topology()).filter(
          (node) => node.role === 'master' && !node.failed && node.slots.length,
        );
        const covered = masters.reduce(
          (sum, node) => sum + node.slots.reduce((n, [a, b]) => n + b - a + 1, 0),
          0,
        );
        return covered === 16_384 && masters.every((node) => children.has(node.port));
      },
      timeoutMs,
      'the Redis Cluster to report cluster_state:ok with every slot on a live master',
    );
  };

  try {
    for (const node of nodes) launch(node.port);
    await Promise.all(
      nodes.map((node) =>
        waitFor(
          async () => (await cli(node.port, 'PING')) === 'PONG',
          startTimeoutMs,
          `redis-server on ${node.address}`,
        ),
      ),
    );
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((node) => node.address),
        '--cluster-replicas',
        '1',
        '--cluster-yes',
      ],
      { timeout: startTimeoutMs },
    );
    await waitHealthy(startTimeoutMs);
    // every replica attached and in sync (a replica that never synced does not take over its master)
    await waitFor(
      async () => {
        const replicas = (await topology()).filter((node) => node.role === 'replica' && node.masterId);
        if (replicas.length !== 3) return false;
        for (const replica of replicas) {
          if (!(await cli(replica.port, 'INFO', 'replication')).includes('master_link_status:up'))
            return false;
        }
        return true;
      },
      startTimeoutMs,
      'three replicas in sync with their masters',
    );
  } catch (error) {
    await close();
    throw error;
  }

  return {
    nodes,
    seeds: nodes.map((node) => node.address).join(','),
    cli,
    topology,
    async masterOf(slot) {
      const master = (await topology()).find(
        (node) =>
          node.role === 'master' && !node.failed && node.slots.some(([a, b]) => a <= slot && slot <= b),
      );
      if (!master) throw new Error(`no live master serves slot ${slot}`);
      return master.port;
    },
    kill,
    async restart(port) {
      launch(port);
      await waitFor(async () => (await cli(port, 'PING')) === 'PONG', startTimeoutMs, `node ${port} back`);
    },
    waitHealthy,
    close,
  };
}

/** `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>…` */
function parseNodeLine(line: string): ClusterNodeState {
  const [id, address, flags, master, , , , , ...slotFields] = line.trim().split(' ');
  const port = Number(address!.split('@')[0]!.split(':').pop());
  const flagList = flags!.split(',');
  const slots: [number, number][] = [];
  for (const field of slotFields) {
    if (field.startsWith('[')) continue; // a slot being migrated or imported
    const [first, last] = field.split('-').map(Number);
    slots.push([first!, last ?? first!]);
  }
  return {
    id: id!,
    port,
    role: flagList.includes('master') ? 'master' : 'replica',
    masterId: master === '-' ? undefined : master,
    failed: flagList.includes('fail') || flagList.includes('fail?'),
    slots,
  };
}
