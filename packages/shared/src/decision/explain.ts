/**
 * Which rule a request would get, and why (the rules API's `POST /rules/explain`, docs/console.md):
 * a front door of the decision core, like the gateway's proxy hook.
 *
 * The request is read the way a gateway reads it off the wire: first what Node's HTTP parser refuses
 * (a method it does not know, case-sensitively; a raw space, control or non-ASCII character in the
 * target; a control character in a header value: request-head.ts), then the target by
 * `normalizePath`, the Host lines by `requestHostOf` (two Host lines or an unreadable one are the
 * same 400), header values as the bytes a client sends, trimmed of the spaces and tabs Node's parser
 * strips, a repeated header joined as Node joins it — and the chosen rule and each limit's client key
 * come from `DecisionCore.decide(facts, PREVIEW)`, the same call a gateway makes, charging nothing.
 * So explain cannot disagree with a gateway running the same rule set
 * (apps/gateway/test/explain-agreement.int.test.ts sends a thousand random requests to both).
 *
 * The reasons for the other rules come from the same matcher, asked about one rule at a time with
 * some of its conditions left out ("probes"): every rule whose path pattern takes the normalised path
 * is considered (SPEC §7), and its method, host, header and client-IP probes say which condition
 * failed. Only the words of a reason (which rule outranks which) restate the documented precedence.
 */
import { GLOBAL_CLIENT_KEY, headerClientKey, ipClientKey } from '../http/client-key.js';
import { type RequestHost, requestHostOf } from '../http/normalize-host.js';
import { normalizePath, type PathErrorCode } from '../http/normalize-path.js';
import {
  fieldValueAsRead,
  methodError,
  type RequestHeadErrorCode,
  targetError,
} from '../http/request-head.js';
import { claimOf, type VerifiedClaims } from '../identity/claims.js';
import { SecretClientKeys } from '../identity/secret-keys.js';
import {
  type CompiledLimit,
  type CompiledRule,
  type CompiledRuleSet,
  compileRules,
  type MatchRequest,
} from '../rules/match.js';
import type { Rule } from '../rules/schema.js';
import { DecisionCore, PREVIEW } from './core.js';
import { joinedHeaderValue, type RequestFacts } from './facts.js';

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
  /** what verifying the request's bearer token gave (the caller verifies; absent: unauthenticated) */
  identity?: ExplainedIdentity | undefined;
}

/** Whether the request has a verified identity: its claims, or why not. */
export type ExplainedIdentity =
  | { authenticated: true; claims: VerifiedClaims }
  | { authenticated: false; reason: string; message?: string };

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

/**
 * Why a gateway would refuse the request with 400 before any rule: what Node's HTTP parser refuses
 * (its method, a raw byte of its target, a header value), its path, or its Host.
 */
export type ExplainErrorCode =
  | RequestHeadErrorCode
  | PathErrorCode
  | Exclude<RequestHost, { ok: true }>['code'];

export interface Explanation {
  path: string | null;
  error: null | { statusCode: 400; code: ExplainErrorCode; message: string };
  host: string | null;
  rule: null | { id: string; name: string };
  unlimited: boolean;
  limits: ExplainedLimit[];
  considered: ConsideredRule[];
  /** the verified claims the rules were matched and keyed with, or why there were none */
  identity: ExplainedIdentity;
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
 * header is keyed by IP; a header sent several times by its lines joined as Node joins them.
 */
export function clientKeyOf(
  limit: Pick<CompiledLimit, 'clientBy' | 'clientHeader'>,
  headerValues: readonly string[] | undefined,
  clientIp: string | undefined,
): string {
  if (limit.clientBy === 'global') return GLOBAL_CLIENT_KEY;
  if (limit.clientBy === 'header') {
    const key = headerClientKey(joinedHeaderValue(limit.clientHeader!, headerValues));
    if (key !== undefined) return key;
  }
  return ipClientKey(clientIp);
}

/** One rule compiled alone, with only some of its `match` fields: asks the matcher one question. */
function probe(rule: Rule, match: Rule['match']): CompiledRuleSet {
  return compileRules([{ ...rule, enabled: true, match } as Rule]);
}

interface Probes {
  /** the path pattern only */
  path: CompiledRuleSet;
  methods: CompiledRuleSet | undefined;
  host: CompiledRuleSet | undefined;
  /** per `match.headers` entry: [lowercase name, value, probe] */
  headers: Array<[string, string, CompiledRuleSet]>;
  clientIps: CompiledRuleSet | undefined;
  notClientIps: CompiledRuleSet | undefined;
  authenticated: CompiledRuleSet | undefined;
  /** per `match.claims` entry: [claim name, wanted, probe] */
  claims: Array<[string, unknown, CompiledRuleSet]>;
}

function probesOf(rule: Rule): Probes {
  const { path, caseInsensitive, methods, host, headers, clientIps, notClientIps, authenticated, claims } =
    rule.match;
  const base = caseInsensitive === undefined ? { path } : { path, caseInsensitive };
  return {
    path: probe(rule, base),
    methods: methods === undefined || methods.length === 0 ? undefined : probe(rule, { ...base, methods }),
    host: host === undefined ? undefined : probe(rule, { ...base, host }),
    headers: Object.entries(headers ?? {}).map(([name, value]) => [
      name.toLowerCase(),
      value,
      probe(rule, { ...base, headers: { [name]: value } }),
    ]),
    clientIps: clientIps === undefined ? undefined : probe(rule, { ...base, clientIps }),
    notClientIps: notClientIps === undefined ? undefined : probe(rule, { ...base, notClientIps }),
    authenticated: authenticated === undefined ? undefined : probe(rule, { ...base, authenticated }),
    claims: Object.entries(claims ?? {}).map(([name, wanted]) => [
      name,
      wanted,
      probe(rule, { ...base, claims: { [name]: wanted } }),
    ]),
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

/** The first condition of `rule` the request fails, in the order a reader checks them; undefined when none. */
function failedCondition(
  rule: Rule,
  probes: Probes,
  facts: RequestFacts,
  clientIp: string | undefined,
): string | undefined {
  if (probes.methods !== undefined && probes.methods.match(facts) === undefined) {
    return `method ${facts.method} is not one of ${rule.match.methods!.join(', ')}`;
  }
  if (probes.host !== undefined && probes.host.match(facts) === undefined) {
    return `host is ${facts.host === undefined ? 'absent' : JSON.stringify(facts.host)}, not ${JSON.stringify(rule.match.host)}`;
  }
  const failed = probes.headers.find(([, , p]) => p.match(facts) === undefined);
  if (failed !== undefined) return headerReason(failed[0], failed[1], facts.header(failed[0]));
  const verified = facts.claims?.();
  if (probes.authenticated !== undefined && probes.authenticated.match(facts) === undefined) {
    return verified === undefined
      ? 'no verified bearer token'
      : 'a verified bearer token (the rule wants none)';
  }
  const claim = probes.claims.find(([, , p]) => p.match(facts) === undefined);
  if (claim !== undefined) {
    const [name, wanted] = claim;
    if (verified === undefined) return `claim ${name} needs a verified bearer token`;
    const actual = claimOf(verified, name);
    return `claim ${name} is ${actual === undefined ? 'absent' : JSON.stringify(actual)}, not ${JSON.stringify(wanted)}`;
  }
  if (probes.clientIps !== undefined && probes.clientIps.match(facts) === undefined) {
    return clientIp === undefined ? 'client IP unknown, so not in clientIps' : 'client IP not in clientIps';
  }
  if (probes.notClientIps !== undefined && probes.notClientIps.match(facts) === undefined) {
    return 'client IP in notClientIps';
  }
  return undefined;
}

/** Rank of a considered rule in the answer: the chosen one, then contenders, then failed conditions, then disabled. */
const RANK = { chosen: 0, lost: 1, failed: 2, disabled: 3 } as const;

function refused(
  code: ExplainErrorCode,
  message: string,
  path: string | null,
  host: string | null,
  identity: ExplainedIdentity,
): Explanation {
  return {
    identity,
    path,
    error: { statusCode: 400, code, message },
    host,
    rule: null,
    unlimited: false,
    limits: [],
    considered: [],
  };
}

/**
 * Compiles a rule set for explaining (once per rule-set version: probes are built lazily per rule and kept).
 * Throws `RuleCompileError` like `compileRules` when an enabled rule cannot be compiled.
 */
export function compileExplainer(
  rules: readonly Rule[],
  options: { secretKeys?: SecretClientKeys } = {},
): RuleExplainer {
  const ruleSet = compileRules(rules);
  // credentials are keyed (and shown) as the gateways sharing CLIENT_KEY_SECRET key them
  const core = new DecisionCore({ secretKeys: options.secretKeys ?? new SecretClientKeys(undefined) });
  core.setRules(ruleSet);
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
    const identity: ExplainedIdentity = request.identity ?? {
      authenticated: false,
      reason: 'no bearer token',
    };
    // what Node's parser refuses before a gateway sees a request, in the order it reads the head
    const head = methodError(request.method) ?? targetError(request.path);
    if (head !== undefined) return refused(head.code, head.message, null, null, identity);
    const lines = new Map<string, string[]>();
    const hostLines = request.host === undefined ? [] : [request.host];
    for (const [name, value] of Object.entries(request.headers ?? {})) {
      const key = name.toLowerCase();
      const values = typeof value === 'string' ? [value] : value;
      // a Host among the headers is one more Host line
      if (key === 'host') hostLines.push(...values);
      else for (const raw of values) lines.set(key, [...(lines.get(key) ?? []), raw]);
    }
    if (hostLines.length > 0) lines.set('host', hostLines);
    for (const [key, values] of lines) {
      for (let i = 0; i < values.length; i++) {
        const read = fieldValueAsRead(key, values[i]!);
        if (typeof read !== 'string') return refused(read.code, read.message, null, null, identity);
        values[i] = read;
      }
    }

    const target = normalizePath(request.path);
    if (!target.ok) return refused(target.code, target.message, null, null, identity);
    const host = requestHostOf(hostLines.length, lines.get('host')?.[0], false);
    if (!host.ok) return refused(host.code, host.message, target.path, null, identity);
    const hostName = host.host === '' ? undefined : host.host;

    const clientIp = request.clientIp;
    const facts: RequestFacts & MatchRequest = {
      method: request.method,
      host: hostName,
      path: target.path,
      header: (name) => lines.get(name),
      joinedHeader: (name) => joinedHeaderValue(name, lines.get(name)),
      clientIp: () => clientIp,
      claims: () => (identity.authenticated ? identity.claims : undefined),
    };
    const decision = core.decide(facts, PREVIEW);
    const chosen =
      decision.kind === 'preview' || decision.kind === 'unlimited' ? decision.rule.compiled : undefined;

    const considered: Array<ConsideredRule & { rank: number }> = [];
    for (const rule of rules) {
      const probes = probesFor(rule);
      if (probes === null || probes.path.match(facts) === undefined) continue;
      const name = rule.name;
      if (!rule.enabled) {
        considered.push({ name, matched: false, reason: 'rule is disabled', rank: RANK.disabled });
        continue;
      }
      const reason = failedCondition(rule, probes, facts, clientIp);
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
      host: hostName ?? null,
      rule: chosen === undefined ? null : { id: chosen.id, name: chosen.name },
      unlimited: chosen?.unlimited ?? false,
      limits:
        decision.kind === 'preview'
          ? decision.rule.limits.map((limit, i) => ({
              name: limit.name,
              algorithm: limit.spec.algorithm,
              clientKey: decision.clientKeys[i]!,
            }))
          : [],
      considered: considered.slice(0, MAX_CONSIDERED).map(({ rank: _, ...entry }) => entry),
      identity,
    };
  }

  return Object.freeze({ ruleSet, explain });
}
