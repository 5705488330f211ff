/**
 * The client-IP conditions of a rule (`match.clientIps`, `match.notClientIps`): IPv4 and IPv6
 * addresses or CIDRs, checked here once and compiled into a `BlockList` once per rule set.
 *
 * An IPv4-mapped IPv6 address (`::ffff:203.0.113.7`, what a dual-stack socket reports for an IPv4
 * peer) is the same client as `203.0.113.7`: Node's BlockList matches either spelling against
 * either kind of entry, and the tests hold it to that.
 */
import { BlockList, isIP } from 'node:net';

/** Most entries in one list: enough for a partner's ranges, small enough to read in a review. */
export const MAX_CLIENT_IPS = 256;

export interface IpNet {
  readonly address: string;
  readonly prefix: number;
  readonly family: 'ipv4' | 'ipv6';
}

/** An address or `address/prefix`, or a message saying what is wrong with it. */
export function parseIpNet(value: string): IpNet | string {
  const slash = value.indexOf('/');
  const address = slash === -1 ? value : value.slice(0, slash);
  // isIP accepts IPv6 zone ids (`fe80::1%eth0`); a rule cannot mean one interface of one host
  const version = address.includes('%') ? 0 : isIP(address);
  if (version === 0) return `"${value}" is not an IPv4 or IPv6 address or CIDR`;
  const family = version === 4 ? 'ipv4' : 'ipv6';
  const bits = version === 4 ? 32 : 128;
  if (slash === -1) return { address, prefix: bits, family };
  const prefixText = value.slice(slash + 1);
  const prefix = Number(prefixText);
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText) || prefix > bits) {
    return `"${value}" has a prefix length outside 0-${bits}`;
  }
  return { address, prefix, family };
}

/** A compiled list of nets. `has` is false for an IP that is not one (the caller decides what that means). */
export interface IpNetSet {
  has(ip: string): boolean;
}

/** Compiles checked entries (see `parseIpNet`); throws on an entry that does not parse. */
export function compileIpNets(values: readonly string[]): IpNetSet {
  const list = new BlockList();
  for (const value of values) {
    const net = parseIpNet(value);
    if (typeof net === 'string') throw new Error(net);
    list.addSubnet(net.address, net.prefix, net.family);
  }
  return {
    has(ip: string): boolean {
      const version = isIP(ip);
      if (version === 0) return false;
      return list.check(ip, version === 4 ? 'ipv4' : 'ipv6');
    },
  };
}
