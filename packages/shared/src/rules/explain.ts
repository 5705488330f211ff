/**
 * Which rule a request would get, and why (the rules API's `POST /rules/explain`, docs/console.md).
 *
 * Nothing here decides a match on its own: the chosen rule is `compileRules(rules).match(…)` on the path
 * `normalizePath` gives, exactly what the gateway runs. The reasons for the other rules come from the same
 * matcher, asked about one rule at a time with some of its conditions left out ("probes"): a rule whose
 * path, method and host probe matches is "considered"; its header and client-IP probes say which condition
 * failed. Only the words of a reason (which rule outranks which) restate the documented precedence.
 */
import { GLOBAL_CLIENT_KEY, headerClientKey, ipClientKey } from '../http/client-key.js';
import { normalizePath, type PathErrorCode } from '../http/normalize-path.js';
import {
  type CompiledLimit,
  type CompiledRule,
  type CompiledRuleSet,
  compileRules,
  type MatchRequest,
  requestHostKey,
} from './match.js';
import type { Rule } from './schema.js';

/** Most entries in `considered`: the chosen rule first, then the closest contenders. */
export const MAX_CONSIDERED = 25;

export interface ExplainRequest {
  method: string;
  /** the Host header as a client would send it (port and case are ignored) */
  host?: string | undefined;
  /** the raw request-target, as the gateway receives it: path and optional `?query` */
  path: string;
  /** header name → value, or the values of a header sent several times */
  headers?: Record<string, string | readonly string[]> | undefined;
  /** the client IP the gateway would see (after TRUST_PROXY) */
  clientIp?: string | undefined;
}

export interface ExplainedLimit {
  name: string;
  algorithm: CompiledLimit['spec']['algorithm'];
  clientKey: string;
}

export interface ConsideredRule {
  name: string;
  /** true when every condition of the rule holds for the request (it may still lose on precedence) */
  matched: boolean;
  reason: string;
}

export interface Explanation {
  path: string | null;
  error: null | { statusCode: 400; code: PathErrorCode; message: string };
  host: string | null;
  rule: null | { id: string; name: string };
  unlimited: boolean;
  limits: ExplainedLimit[];
  considered: ConsideredRule[];
}

export interface RuleExplainer {
  /** the same compiled set a gateway builds from these rules */
  readonly ruleSet: CompiledRuleSet;
  explain(request: ExplainRequest): Explanation;
}

/** `ip:<address>`, written exactly as the gateway keys it (IPv6 by /64, IPv4-mapped as IPv4). */
export function ipClientKeyOf(address: string | undefined): string {
  return ipClientKey(address);
}

/**
 * A limit's client key for a request, exactly as the gateway keys it: `ip:…`, `header:<value>` (the
 * SHA-256 hex of the value when it is longer than 256 bytes), `global`. A header client without the
 * header is keyed by IP.
 */
export function clientKeyOf(
  limit: Pick<CompiledLimit, 'clientBy' | 'clientHeader'>,
  headerValues: readonly string[] | undefined,
  clientIp: string | undefined,
): string {
  if (limit.clientBy === 'global') return GLOBAL_CLIENT_KEY;
  if (limit.clientBy === 'header') {
    // Node joins a repeated header's values with ", " in `req.headers`, which the gateway keys by.
    const key = headerClientKey(headerValues === undefined ? undefined : headerValues.join(', '));
    if (key !== undefined) return key;
  }
  return ipClientKey(clientIp);
}

/** One rule compiled alone, with only some of its `match` fields: asks the matcher one question. */
function probe(rule: Rule, match: Rule['match']): CompiledRuleSet {
  return compileRules([{ ...rule, enabled: true, match } as Rule]);
}

interface Probes {
  /** path, methods and host only */
  fits: CompiledRuleSet;
  /** per `match.headers` entry: [lowercase name, value, probe] */
  headers: Array<[string, string, CompiledRuleSet]>;
  clientIps: CompiledRuleSet | undefined;
  notClientIps: CompiledRuleSet | undefined;
}

function probesOf(rule: Rule): Probes {
  const { path, caseInsensitive, methods, host, headers, clientIps, notClientIps } = rule.match;
  const base = caseInsensitive === undefined ? { path } : { path, caseInsensitive };
  return {
    fits: probe(rule, {
      ...base,
      ...(methods === undefined ? {} : { methods }),
      ...(host === undefined ? {} : { host }),
    }),
    headers: Object.entries(headers ?? {}).map(([name, value]) => [
      name.toLowerCase(),
      value,
      probe(rule, { ...base, headers: { [name]: value } }),
    ]),
    clientIps: clientIps === undefined ? undefined : probe(rule, { ...base, clientIps }),
    notClientIps: notClientIps === undefined ? undefined : probe(rule, { ...base, notClientIps }),
  };
}

/** Why `loser` (whose conditions hold) lost to `winner`, in the words of the precedence list. */
function whyLost(loser: CompiledRule, winner: CompiledRule): string {
  const against = JSON.stringify(winner.name);
  if (loser.priority !== winner.priority) {
    return `lower priority than ${against} (${loser.priority} < ${winner.priority})`;
  }
  const [l, s, g] = loser.specificity;
  const [wl, ws, wg] = winner.specificity;
  if (l !== wl || s !== ws || g !== wg) {
    return `less specific path than ${against} (${loser.rule.match.path} vs ${winner.rule.match.path})`;
  }
  if (loser.conditions !== winner.conditions) {
    return `fewer conditions than ${against} (${loser.conditions} < ${winner.conditions})`;
  }
  return `same precedence as ${against}, whose name sorts first`;
}

function headerReason(name: string, value: string, values: readonly string[] | undefined): string {
  if (values === undefined) return `header ${name} is missing (wanted ${JSON.stringify(value)})`;
  if (values.length > 1)
    return `header ${name} is sent ${values.length} times (a repeated header never matches)`;
  return `header ${name} is not ${JSON.stringify(value)}`;
}

/** Rank of a considered rule in the answer: the chosen one, then contenders, then failed conditions, then disabled. */
const RANK = { chosen: 0, lost: 1, failed: 2, disabled: 3 } as const;

/**
 * Compiles a rule set for explaining (once per rule-set version: probes are built lazily per rule and kept).
 * Throws `RuleCompileError` like `compileRules` when an enabled rule cannot be compiled.
 */
export function compileExplainer(rules: readonly Rule[]): RuleExplainer {
  const ruleSet = compileRules(rules);
  const compiledById = new Map(ruleSet.rules.map((c) => [c.id, c]));
  const probeCache = new Map<string, Probes | null>();
  const probesFor = (rule: Rule): Probes | null => {
    let probes = probeCache.get(rule.id);
    if (probes === undefined) {
      try {
        probes = probesOf(rule);
      } catch {
        // a disabled rule in a broken snapshot: the gateway never compiles it either
        probes = null;
      }
      probeCache.set(rule.id, probes);
    }
    return probes;
  };

  function explain(request: ExplainRequest): Explanation {
    const host = requestHostKey(request.host) ?? null;
    const target = normalizePath(request.path);
    if (!target.ok) {
      return {
        path: null,
        error: { statusCode: 400, code: target.code, message: target.message },
        host,
        rule: null,
        unlimited: false,
        limits: [],
        considered: [],
      };
    }
    const headers = new Map<string, readonly string[]>();
    for (const [name, value] of Object.entries(request.headers ?? {})) {
      const key = name.toLowerCase();
      const values = typeof value === 'string' ? [value] : value;
      headers.set(key, [...(headers.get(key) ?? []), ...values]);
    }
    const matchRequest: MatchRequest = {
      method: request.method.toUpperCase(),
      host: request.host,
      path: target.path,
      header: (name) => headers.get(name),
      clientIp: () => request.clientIp,
    };
    const chosen = ruleSet.match(matchRequest);

    const considered: Array<ConsideredRule & { rank: number }> = [];
    for (const rule of rules) {
      const probes = probesFor(rule);
      if (probes === null || probes.fits.match(matchRequest) === undefined) continue;
      const name = rule.name;
      if (!rule.enabled) {
        considered.push({ name, matched: false, reason: 'rule is disabled', rank: RANK.disabled });
        continue;
      }
      const failed = probes.headers.find(([, , p]) => p.match(matchRequest) === undefined);
      let reason: string | undefined;
      if (failed !== undefined) reason = headerReason(failed[0], failed[1], headers.get(failed[0]));
      else if (probes.clientIps !== undefined && probes.clientIps.match(matchRequest) === undefined) {
        reason =
          request.clientIp === undefined
            ? 'client IP unknown, so not in clientIps'
            : 'client IP not in clientIps';
      } else if (probes.notClientIps !== undefined && probes.notClientIps.match(matchRequest) === undefined) {
        reason = 'client IP in notClientIps';
      }
      if (reason !== undefined) {
        considered.push({ name, matched: false, reason, rank: RANK.failed });
      } else if (chosen !== undefined && chosen.id === rule.id) {
        const mode = chosen.unlimited
          ? 'no limit'
          : chosen.shadow
            ? 'shadow: counted, never 429'
            : 'enforced';
        considered.push({ name, matched: true, reason: `chosen (${mode})`, rank: RANK.chosen });
      } else {
        const self = compiledById.get(rule.id);
        considered.push({
          name,
          matched: true,
          reason:
            chosen === undefined || self === undefined ? 'not chosen by the matcher' : whyLost(self, chosen),
          rank: RANK.lost,
        });
      }
    }
    considered.sort((a, b) => a.rank - b.rank);

    return {
      path: target.path,
      error: null,
      host,
      rule: chosen === undefined ? null : { id: chosen.id, name: chosen.name },
      unlimited: chosen?.unlimited ?? false,
      limits: (chosen?.limits ?? []).map((limit) => ({
        name: limit.name,
        algorithm: limit.spec.algorithm,
        clientKey: clientKeyOf(
          limit,
          limit.clientHeader === undefined ? undefined : headers.get(limit.clientHeader),
          request.clientIp,
        ),
      })),
      considered: considered.slice(0, MAX_CONSIDERED).map(({ rank: _, ...entry }) => entry),
    };
  }

  return Object.freeze({ ruleSet, explain });
}
