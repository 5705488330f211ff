/**
 * The defaults of a rule (docs/rules.md): what the rules API stores for a checked input, and what the
 * CLI compares a rules file with. A limit's own defaults are its algorithm's (`withDefaults` of its
 * plug-in's rule format).
 */

import type { Client } from '../format/fields.js';
import { DEFAULT_CLIENT_CLAIM } from '../identity/claims.js';
import { algorithmNamed, DEFAULT_ALGORITHM } from '../limiter/algorithms/index.js';
import type { RuleLimit, RuleLimitInput } from './limit-schema.js';
import type { RuleFields, RuleFieldsV1, RuleFieldsV2, RuleInput, RuleInputV1, RuleMatch } from './schema.js';

function matchWithDefaults(input: RuleMatch): RuleMatch {
  const match: RuleMatch = { path: input.path };
  if (input.methods !== undefined) match.methods = input.methods;
  if (input.host !== undefined) match.host = input.host.toLowerCase();
  if (input.headers !== undefined) {
    // fromEntries defines own properties, so even a `__proto__` key could not touch the prototype
    match.headers = Object.fromEntries(
      Object.entries(input.headers).map(([name, value]) => [name.toLowerCase(), value]),
    );
  }
  if (input.claims !== undefined) {
    match.claims = Object.fromEntries(
      Object.entries(input.claims).map(([name, value]) => [name, Array.isArray(value) ? [...value] : value]),
    );
  }
  if (input.authenticated !== undefined) match.authenticated = input.authenticated;
  if (input.clientIps !== undefined) match.clientIps = [...input.clientIps];
  if (input.notClientIps !== undefined) match.notClientIps = [...input.notClientIps];
  if (input.caseInsensitive !== undefined) match.caseInsensitive = input.caseInsensitive;
  return match;
}

/**
 * `client` with its default (`ip`); a header name in lower case (its `secret` kept only when written,
 * so rules written before it existed read back unchanged); a `jwt` client's claim (default `sub`).
 */
export function clientWithDefaults(input: Client | undefined): Client {
  if (input?.by === 'header') {
    const client: Client = { by: 'header', name: (input.name ?? '').toLowerCase() };
    if (input.secret !== undefined) client.secret = input.secret;
    return client;
  }
  if (input?.by === 'jwt') return { by: 'jwt', claim: input.claim ?? DEFAULT_CLIENT_CLAIM };
  return { by: input?.by ?? 'ip' };
}

/** A checked limit with its defaults, as its algorithm stores it. */
function limitWithDefaults(input: RuleLimitInput): RuleLimit {
  const algorithm = algorithmNamed(input.algorithm ?? DEFAULT_ALGORITHM);
  if (algorithm === undefined) throw new TypeError(`withDefaults: unknown algorithm "${input.algorithm}"`);
  return algorithm.rule.withDefaults(input, clientWithDefaults(input.client)) as RuleLimit;
}

function lifecycleWithDefaults(input: RuleInput): Pick<RuleFieldsV2, 'charge' | 'refund' | 'mode'> {
  const out: Pick<RuleFieldsV2, 'charge' | 'refund' | 'mode'> = {};
  if (input.charge !== undefined) out.charge = { ...input.charge };
  if (input.refund !== undefined) {
    out.refund = { statuses: [...input.refund.statuses] };
    // no default written: it is each limit's own (its capacity or max)
    if (input.refund.max !== undefined) out.refund.max = input.refund.max;
  }
  if (input.mode !== undefined) out.mode = input.mode;
  return out;
}

/**
 * Fills in the defaults of a checked input (run `checkRule` first). A PUT goes through here too, so an
 * omitted `maxDebt` follows `capacity`. Key order is the order the API shows.
 */
export function withDefaults(input: RuleInputV1): RuleFieldsV1;
export function withDefaults(input: RuleInput): RuleFields;
export function withDefaults(input: RuleInput): RuleFields {
  const head = {
    name: input.name,
    ...(input.description !== undefined ? { description: input.description } : {}),
    match: matchWithDefaults(input.match),
  };
  const flags = {
    enabled: input.enabled ?? true,
    shadow: input.shadow ?? false,
    priority: input.priority ?? 0,
  };
  if (input.limits !== undefined) {
    return {
      ...head,
      limits: input.limits.map(limitWithDefaults),
      cost: input.cost ?? 1,
      ...lifecycleWithDefaults(input),
      ...flags,
    };
  }
  if (input.unlimited === true) return { ...head, unlimited: true, ...flags };
  if (input.limit === undefined) throw new TypeError('withDefaults: a rule needs limit, limits or unlimited');
  return {
    ...head,
    client: clientWithDefaults(input.client),
    limit: { ...input.limit },
    cost: input.cost ?? 1,
    maxDebt: input.maxDebt ?? input.limit.capacity,
    ...lifecycleWithDefaults(input),
    ...flags,
  };
}
