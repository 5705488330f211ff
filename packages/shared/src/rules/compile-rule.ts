/**
 * One rule compiled for the gateway, once per rule-set refresh: its limits as specs (each algorithm's
 * plug-in compiles its own), the `RateLimit-Policy` it sends, what it charges and refunds at the
 * response, and its precedence key (match.ts indexes rules by it).
 */

import type { RuleFieldError } from '../format/fields.js';
import { DEFAULT_CLIENT_CLAIM } from '../identity/claims.js';
import { isSecretHeader } from '../identity/secret-keys.js';
import { algorithmNamed, algorithmOf } from '../limiter/algorithms/index.js';
import { headerItemName, policyItem } from '../limiter/headers.js';
import type { LimitSpec } from '../limiter/limits.js';
import { checkRule } from './check.js';
import type { RuleLimit } from './limit-schema.js';
import { limitsOf } from './limits-of.js';
import { type PathSpecificity, pathSpecificity, ruleConditions } from './precedence.js';
import type { Rule } from './schema.js';

export { DEFAULT_SLOT_LEASE_MS } from '../limiter/algorithms/concurrency/rule-format.js';

/** One limit of a compiled rule: what the engine decides and what the RateLimit headers say. */
export interface CompiledLimit {
  /** '' for a format-1 rule's single limit */
  readonly name: string;
  readonly spec: LimitSpec;
  /** what one request takes from this limit: the limit's `cost`, else the rule's (1 for a limit that takes no cost) */
  readonly cost: number;
  readonly clientBy: 'ip' | 'header' | 'global' | 'jwt';
  /** lowercase header name when `clientBy` is `header`, else undefined */
  readonly clientHeader: string | undefined;
  /** a `header` client whose value is a credential: keyed `header:~<HMAC>` (identity/secret-keys.ts) */
  readonly clientSecret: boolean;
  /** the verified claim a `jwt` client is keyed by, else undefined */
  readonly clientClaim: string | undefined;
  /** the name in RateLimit headers: `<rule>` for format 1, `<rule>.<limit>` for format 2 */
  readonly label: string;
  /**
   * This limit's item of `RateLimit-Policy`: token bucket `"<label>";q=<capacity>;w=<seconds to refill
   * capacity>`, sliding window `"<label>";q=<max>;w=<window seconds>` (seconds rounded up, at least 1),
   * concurrency `"<label>";q=<max>;qu="concurrent-requests"`
   */
  readonly policyItem: string;
}

/** What a rule charges at the response (`charge`), compiled. */
export interface CompiledCharge {
  readonly from: 'header' | 'duration' | 'bytes';
  /** from "header": the response header, lowercase */
  readonly header: string | undefined;
  /** from "duration": one token per this many ms of upstream time (rounded up) */
  readonly unitMs: number;
  /** from "bytes": one token per this many bytes of response body (rounded up) */
  readonly unitBytes: number;
  /** most one request may cost: `charge.max`, else the largest any limit can ever take (capacity + maxDebt, a window's max) */
  readonly max: number;
}

/** What the gateway needs per request, computed once per rule-set refresh. */
export interface CompiledRule {
  readonly rule: Rule;
  readonly id: string;
  readonly name: string;
  /** its position in `CompiledRuleSet.rules` (per-rule data of a rule set can live in an array by it) */
  readonly index: number;
  readonly priority: number;
  readonly shadow: boolean;
  /** 1: written with `limit`; 2: with `limits`, or `unlimited` */
  readonly format: 1 | 2;
  readonly unlimited: boolean;
  /** in the rule's order; [] when unlimited; format 1: one limit named '' */
  readonly limits: readonly CompiledLimit[];
  /** the full `RateLimit-Policy` value: the limits' policy items joined with ', ' ('' when unlimited) */
  readonly policyHeader: string;
  /** `charge`: what the request really cost, settled at the response; undefined: its cost stands */
  readonly charge: CompiledCharge | undefined;
  /** `refund.statuses` as status codes: an answer with one gives the whole cost back */
  readonly refundStatuses: ReadonlySet<number> | undefined;
  /** `refund.max`: what refunds give back per limit and client per period; undefined: each limit's default */
  readonly refundMax: number | undefined;
  /** `mode`: "lease" lets a gateway take token-bucket tokens in advance (default "exact") */
  readonly mode: 'exact' | 'lease';
  readonly specificity: PathSpecificity;
  /** how many conditions the rule sets (precedence step 4) */
  readonly conditions: number;
  /** it reads a verified token: a limit keyed by `jwt`, or `match.claims` / `match.authenticated` */
  readonly usesIdentity: boolean;
}

/** A rule in the set cannot be compiled (it would have been rejected by the rules API). */
export class RuleCompileError extends Error {
  readonly code = 'RULE_INVALID';
  constructor(
    readonly ruleName: string,
    readonly errors: readonly RuleFieldError[],
  ) {
    super(`rule "${ruleName}": ${errors.map((e) => `${e.field} ${e.message}`).join('; ')}`);
  }
}

function compileLimit(rule: Rule, limit: RuleLimit, ruleCost: number): CompiledLimit {
  const algorithm = algorithmNamed(limit.algorithm);
  if (algorithm === undefined) {
    throw new RuleCompileError(rule.name, [
      { field: 'limits', message: `algorithm "${limit.algorithm}" cannot be compiled` },
    ]);
  }
  const label = limit.name === '' ? rule.name : `${rule.name}.${limit.name}`;
  const spec: LimitSpec = Object.freeze(algorithm.rule.compile(limit));
  return Object.freeze({
    name: limit.name,
    spec,
    cost:
      algorithm.rule.costless !== undefined
        ? 1
        : 'cost' in limit && limit.cost !== undefined
          ? limit.cost
          : ruleCost,
    clientBy: limit.client.by,
    clientHeader: limit.client.by === 'header' ? limit.client.name?.toLowerCase() : undefined,
    clientSecret:
      limit.client.by === 'header' && isSecretHeader(limit.client.name ?? '', limit.client.secret),
    clientClaim: limit.client.by === 'jwt' ? (limit.client.claim ?? DEFAULT_CLIENT_CLAIM) : undefined,
    label,
    // the numbers come from the one header-arithmetic module
    policyItem: policyItem(headerItemName(label, ''), spec),
  });
}

function compileLimits(rule: Rule): CompiledLimit[] {
  const ruleCost = 'cost' in rule ? rule.cost : 1;
  return limitsOf(rule).map((limit) => compileLimit(rule, limit, ruleCost));
}

function compileCharge(rule: Rule, limits: readonly CompiledLimit[]): CompiledCharge | undefined {
  if (!('charge' in rule) || rule.charge === undefined) return undefined;
  const charge = rule.charge;
  let largest = 0;
  for (const { spec } of limits) largest = Math.max(largest, algorithmOf(spec).chargeCeiling(spec));
  return Object.freeze({
    from: charge.from,
    header: charge.header?.toLowerCase(),
    unitMs: charge.unitMs ?? 1,
    unitBytes: charge.unitBytes ?? 1,
    max: charge.max ?? largest,
  });
}

/** The status codes `refund.statuses` names, classes ("5xx") spelled out; undefined without `refund`. */
function compileRefund(rule: Rule): ReadonlySet<number> | undefined {
  if (!('refund' in rule) || rule.refund === undefined) return undefined;
  const codes = new Set<number>();
  for (const status of rule.refund.statuses) {
    if (typeof status === 'number') codes.add(status);
    else
      for (let code = Number(status[0]) * 100; code < Number(status[0]) * 100 + 100; code++) codes.add(code);
  }
  return codes;
}

/**
 * Compiles one enabled rule, `index` being its place in the rule set. Throws `RuleCompileError` (code
 * `RULE_INVALID`) if it breaks what `checkRule` checks.
 */
export function compileRule(rule: Rule, index: number): CompiledRule {
  const errors = checkRule(rule);
  if (errors.length > 0) throw new RuleCompileError(rule.name, errors);
  const limits = Object.freeze(compileLimits(rule));
  return Object.freeze({
    rule,
    id: rule.id,
    name: rule.name,
    index,
    priority: rule.priority,
    shadow: rule.shadow,
    format: 'limit' in rule ? 1 : 2,
    unlimited: 'unlimited' in rule && rule.unlimited === true,
    limits,
    policyHeader: limits.map((l) => l.policyItem).join(', '),
    charge: compileCharge(rule, limits),
    refundStatuses: compileRefund(rule),
    refundMax: 'refund' in rule ? rule.refund?.max : undefined,
    mode: 'mode' in rule && rule.mode === 'lease' ? 'lease' : 'exact',
    specificity: Object.freeze(pathSpecificity(rule.match.path)),
    conditions: ruleConditions(rule.match),
    usesIdentity:
      limits.some((limit) => limit.clientBy === 'jwt') ||
      rule.match.claims !== undefined ||
      rule.match.authenticated !== undefined,
  });
}
