/**
 * Where one client stands against every limit of one rule now, charging nothing (the gateway's
 * `GET /usage`, docs/visibility.md). The limits' states are read as each algorithm stores them
 * (`Store.peek`) and evaluated with the TypeScript twins of the algorithms, so the answer is what the
 * client's next request would be told by each limit (a concurrency limit: the slots in flight).
 */
import { isIP } from 'node:net';
import {
  GLOBAL_CLIENT_KEY,
  ipClientKey,
  type LimitCheck,
  type LimitOutcome,
  limitKey,
  MAX_CLIENT_KEY_BYTES,
  type RulePlan,
  type SecretClientKeys,
  usageOf,
} from '@sluice/shared';

/**
 * Whether `key` is a client key as the gateway writes it: `global`, `header:<value>` or
 * `jwt:<claim value>` (at most 256 bytes, else its SHA-256), or `ip:<address>` in the gateway's canonical form (IPv6 as its /64).
 */
export function isClientKey(key: string): boolean {
  if (key === GLOBAL_CLIENT_KEY) return true;
  if (key.startsWith('header:') || key.startsWith('jwt:')) {
    const value = key.slice(key.indexOf(':') + 1);
    return value !== '' && Buffer.byteLength(value) <= MAX_CLIENT_KEY_BYTES && !/[\r\n\0]/.test(value);
  }
  if (key.startsWith('ip:')) {
    const address = key.slice('ip:'.length).replace(/::\/64$/, '::');
    return isIP(address) !== 0 && ipClientKey(address) === key;
  }
  return false;
}

export interface LimitUsageAnswer {
  name: string;
  algorithm: string;
  remaining: number;
  debt: number;
  inFlight: number;
  fullInSeconds: number;
}

export interface UsageAnswer {
  rule: string;
  /** the client as the answer may show it: a credential only as its digest */
  client: string;
  limits: LimitUsageAnswer[];
}

/**
 * The usage of `client` (a client key, `isClientKey`) under `plan`. A credential is looked up by its
 * digest, as the core keys it, so an admin may type the raw value. Rejects when the store cannot be read.
 */
export async function usageOfClient(
  plan: RulePlan,
  ruleName: string,
  client: string,
  secretKeys: SecretClientKeys,
  peek: (checks: readonly LimitCheck[]) => Promise<LimitOutcome[]>,
): Promise<UsageAnswer> {
  const keyOf = (secret: boolean) => secretKeys.lookupKey(client, secret);
  // a global limit counts everyone under one key, whoever asks
  const checks: LimitCheck[] = plan.limits.map((limit) => ({
    key: limitKey(
      '',
      plan.id,
      limit.keyName,
      limit.clientBy === 'global' ? GLOBAL_CLIENT_KEY : keyOf(limit.clientSecret),
    ),
    spec: limit.spec,
    cost: limit.cost,
  }));
  // the answer never repeats a credential in clear
  const shown = plan.limits.some((limit) => limit.clientSecret) ? keyOf(true) : client;
  const outcomes = await peek(checks);
  return {
    rule: ruleName,
    client: shown,
    limits: plan.limits.map((limit, i) => {
      const usage = usageOf(limit.spec, outcomes[i]!);
      return {
        name: limit.name,
        algorithm: limit.spec.algorithm,
        remaining: usage.remaining,
        debt: usage.debt,
        inFlight: usage.inFlight,
        fullInSeconds: usage.fullInSeconds,
      };
    }),
  };
}
