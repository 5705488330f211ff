/**
 * `host:port` seed lists (`REDIS_CLUSTER_NODES`): the one parser both processes check their
 * configuration with and the Redis client factory connects with, so that a seed a process accepts at
 * start is one its client can reach.
 */
import { isIPv6 } from 'node:net';
import { type EnvVar, envCustom, got, type Parsed } from './env-vars.js';

export interface HostPort {
  /** a name, an IPv4 address, or an IPv6 address without its brackets */
  readonly host: string;
  readonly port: number;
}

/** What a seed list must look like, at the start of every problem with one. */
const SEEDS_SHAPE = 'comma-separated host:port (IPv6 in brackets), e.g. redis-1:6379,[::1]:7000';

// A name or an IPv4 address holds no ':' (the port's separator) and no '/' (that is a URL, not a seed).
const HOST_PORT_RE = /^(?:\[([^\]]*)\]|([^\s:[\]/]+)):([0-9]+)$/;

/** One trimmed `host:port`, or what is wrong with it as a phrase after the entry's quoted text. */
function checkHostPort(text: string): HostPort | { problem: string } {
  const match = HOST_PORT_RE.exec(text);
  if (match === null) {
    const colons = text.split(':').length - 1;
    // `::1:7000`: the address's last group cannot be told from a port
    if (colons > 1 && !text.startsWith('[')) {
      return { problem: 'needs brackets around its IPv6 address, e.g. [::1]:7000' };
    }
    return { problem: colons === 0 ? 'has no port' : 'is not host:port' };
  }
  const [, v6, name, portText] = match;
  if (v6 !== undefined && !isIPv6(v6)) return { problem: 'has no IPv6 address in its brackets' };
  const port = Number(portText);
  if (!(port >= 1 && port <= 65_535)) return { problem: `has port ${portText}, outside 1–65535` };
  return { host: v6 ?? name!, port };
}

/** `host:port`, `1.2.3.4:port` or `[v6]:port` → host (without brackets) and port; else undefined. */
export function parseHostPort(text: string): HostPort | undefined {
  const node = checkHostPort(text.trim());
  return 'problem' in node ? undefined : node;
}

/**
 * A comma-separated seed list → its entries as written (trimmed, empty ones skipped, `[::1]:7000` keeps
 * its brackets); or the problem with it, naming the first bad entry, worded as `EnvVar` problems are.
 */
export function parseSeedList(raw: string): Parsed<string[]> {
  const seeds = raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  if (seeds.length === 0) return { problem: `must be ${SEEDS_SHAPE} ${got(raw)}` };
  for (const seed of seeds) {
    const node = checkHostPort(seed);
    if ('problem' in node) {
      return { problem: `must be ${SEEDS_SHAPE}; ${JSON.stringify(seed)} ${node.problem} ${got(raw)}` };
    }
  }
  return { value: seeds };
}

/** `REDIS_CLUSTER_NODES` as both processes declare it (they differ only in what they say it is for). */
export function envSeedList(description: string): EnvVar<string[] | undefined> {
  return envCustom({
    description,
    accepts: 'comma-separated host:port (IPv6 in brackets), e.g. redis-1:6379,redis-2:6379',
    parse: parseSeedList,
  });
}
