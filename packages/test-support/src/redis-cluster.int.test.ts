/** The Redis Cluster helper: 3 masters covering every slot, 3 replicas, and nothing left behind. */
import { existsSync } from 'node:fs';
import { expect, it } from 'vitest';
import { startRedisCluster } from './index.js';

it('starts 3 masters with a replica each on free ports, and close() kills them all', async () => {
  const cluster = await startRedisCluster();
  let closed = false;
  try {
    const topology = await cluster.topology();
    const masters = topology.filter((node) => node.role === 'master');
    expect(masters).toHaveLength(3);
    expect(topology.filter((node) => node.role === 'replica')).toHaveLength(3);
    const slots = masters.reduce((n, m) => n + m.slots.reduce((s, [a, b]) => s + b - a + 1, 0), 0);
    expect(slots).toBe(16_384);
    expect(cluster.seeds.split(',')).toHaveLength(6);
    expect(masters.map((m) => m.port)).toContain(await cluster.masterOf(0));
    const dir = (await cluster.cli(cluster.nodes[0]!.port, 'CONFIG', 'GET', 'dir')).split('\n')[1]!;
    await cluster.close();
    closed = true;
    expect(existsSync(dir)).toBe(false);
    await expect(cluster.cli(cluster.nodes[0]!.port, 'PING')).rejects.toThrow();
  } finally {
    if (!closed) await cluster.close();
  }
}, 60_000);
