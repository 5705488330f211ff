/**
 * Which rule applies to a request, compiled once per rule-set refresh (user reference: docs/rules.md,
 * "Which rule applies").
 *
 * Precedence, best first:
 *   1. enabled rules only (a disabled rule is left out at compile time);
 *   2. highest `priority`;
 *   3. most specific path, by the tuple `PathSpecificity = [literals, stars, globstar]` compared as
 *      (more literal segments) → (fewer `*` segments) → (no final `**` before a final `**`).
 *      Lexicographic: `/a/b/**` (2 literals) beats `/a/*` (1 literal); `/a/**` beats `/*\/b`
 *      (same literals, fewer `*`); `/a` beats `/a/**`;
 *   4. more conditions: 1 for a non-empty `methods`, 1 for `host`, 1 per `headers` entry, 1 for
 *      `clientIps`, 1 for `notClientIps`;
 *   5. smallest `name` by plain string comparison (UTF-16 code units, like `<`);
 *   6. smallest `id` — names are unique in the rules API, this only keeps a broken snapshot deterministic.
 *
 * Method: a rule without `methods` (or with `[]`) accepts every method; otherwise the request method
 * must be listed exactly (case-sensitive; request methods arrive uppercase), except that `GET` also
 * takes `HEAD` (servers answer HEAD with their GET handler).
 * Host: a rule without `host` accepts every host (and requests without one). Otherwise the request's
 * Host, lowercased and without its `:port` and one trailing dot, must equal the rule's host.
 * Path: the matcher receives a normalised path in canonical form (`canonicalRulePath` in
 * http/normalize-path.ts); rule paths are compiled to that form, so `/ü` in a rule matches `/%C3%BC`.
 * Escaped sub-delims, `:` and `@` (`%3A`, `%21`, …) match like the raw character, because upstreams
 * decode them: `/v1/items%3Abatch` is `/v1/items:batch` to them, and so to the rules. A single trailing slash is ignored on
 * both the pattern and the request, so `/a/` ≡ `/a`. Literal segments are case-sensitive unless the
 * rule says `match.caseInsensitive` (ASCII letters only); `*` is exactly one segment; a final `**` is
 * zero or more (`/a/**` matches `/a`, `/a/` and `/a/b/c`).
 * Headers: each `match.headers` entry holds only when the request carries that header exactly once with
 * exactly that value; a repeated header satisfies no condition (a client cannot pick the reading it likes).
 * Client IPs: `clientIps` holds when the client IP is in one of the nets, `notClientIps` when it is in
 * none; an unknown IP never satisfies `clientIps` and always satisfies `notClientIps`.
 *
 * Lookup walks a segment trie: its cost grows with the number of path segments (and the trie
 * branches a path can follow: one literal child and one `*` child per level) plus the conditions of the
 * candidate rules it tests, not with the number of rules. Each trie node keeps its rules pre-sorted by
 * precedence, so the first one whose method and conditions accept is the best of that node, and
 * scanning stops as soon as a rule cannot beat the best found so far. Rules are also indexed by host,
 * and case-insensitive rules live in tries of their own, searched only when such rules exist.
 */

import { canonicalRulePath } from '../http/normalize-path.js';
import { pathSegments } from '../http/path-segments.js';
import { headerItemName, policyItem } from '../limiter/headers.js';
import type { LimitSpec } from '../limiter/limits.js';
import { parseDuration } from './duration.js';
import { compileIpNets, type IpNetSet } from './ip-nets.js';
import {
  checkRule,
  HTTP_METHODS,
  type Rule,
  type RuleFieldError,
  type RuleV1,
  type RuleV2,
} from './schema.js';

/** `[literal segments, '*' segments, 1 if the pattern ends in '**' else 0]` of a rule's path pattern. */
export type PathSpecificity = readonly [literals: number, stars: number, globstar: 0 | 1];

/** One limit of a compiled rule: what the engine decides and what the RateLimit headers say. */
export interface CompiledLimit {
  /** '' for a format-1 rule's single limit */
  readonly name: string;
  readonly spec: LimitSpec;
  /** what one request takes from this limit: the limit's `cost`, else the rule's */
  readonly cost: number;
  readonly clientBy: 'ip' | 'header' | 'global';
  /** lowercase header name when `clientBy` is `header`, else undefined */
  readonly clientHeader: string | undefined;
  /** the name in RateLimit headers: `<rule>` for format 1, `<rule>.<limit>` for format 2 */
  readonly label: string;
  /**
   * This limit's item of `RateLimit-Policy`: token bucket `"<label>";q=<capacity>;w=<seconds to refill
   * capacity>`, sliding window `"<label>";q=<max>;w=<window seconds>` (seconds rounded up, at least 1),
   * concurrency `"<label>";q=<max>;qu="concurrent-requests"`
   */
  readonly policyItem: string;
}

/** What the gateway needs per request, computed once per rule-set refresh. */
export interface CompiledRule {
  readonly rule: Rule;
  /** its position in `CompiledRuleSet.rules` (per-rule data elsewhere is kept in arrays indexed by it) */
  readonly index: number;
  readonly id: string;
  readonly name: string;
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
  /** `mode`: "lease" lets a gateway take token-bucket tokens in advance (default "exact") */
  readonly mode: 'exact' | 'lease';
  readonly specificity: PathSpecificity;
  /** how many conditions the rule sets (precedence step 4) */
  readonly conditions: number;
}

export interface MatchRequest {
  /** uppercase HTTP method */
  method: string;
  /** the Host header as received (any case, maybe with `:port`); undefined when absent */
  host: string | undefined;
  /** normalised path in canonical form: starts with `/`, no `//`, no dot segments */
  path: string;
  /** every value of a request header (by lowercase name) as received, one per field line; undefined when absent */
  header?: (lowercaseName: string) => readonly string[] | undefined;
  /** the client IP as TRUST_PROXY decides it; called at most once per lookup, only when a candidate rule tests it */
  clientIp?: () => string | undefined;
}

export interface CompiledRuleSet {
  /** the rule that applies to the request, or undefined (proxy without limit) */
  match(req: MatchRequest): CompiledRule | undefined;
  /** number of rules that can match (enabled rules) */
  readonly size: number;
  /** the enabled rules, compiled, in input order */
  readonly rules: readonly CompiledRule[];
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

/** Escapes (upper-case hex, as the normaliser leaves them) of the characters a rule path holds raw. */
const SUB_DELIM_ESCAPE = /%(2[146-9A-C]|3[ABD]|40)/g;

/** `/v1/items%3Abatch` → `/v1/items:batch`; `%2F`, `%25` and non-ASCII escapes stay as they are. */
function decodeSubDelims(path: string): string {
  return path.replace(SUB_DELIM_ESCAPE, (_escape, hex: string) =>
    String.fromCharCode(Number.parseInt(hex, 16)),
  );
}

/** The specificity tuple of a path pattern (see the module comment for how tuples compare). */
export function pathSpecificity(pattern: string): PathSpecificity {
  let literals = 0;
  let stars = 0;
  let globstar: 0 | 1 = 0;
  for (const segment of pathSegments(pattern)) {
    if (segment === '*') stars++;
    else if (segment === '**') globstar = 1;
    else literals++;
  }
  return [literals, stars, globstar];
}

/**
 * The lowercase host a request names, without port and one trailing dot: `Example.COM.:8080` →
 * `example.com`, `[::1]:8080` → `[::1]`. A bare IPv6 address (several colons, no brackets) is kept whole.
 */
export function requestHostKey(host: string | undefined): string | undefined {
  if (host === undefined || host === '') return undefined;
  let name = host;
  if (name.charCodeAt(0) === 91 /* [ */) {
    const close = name.indexOf(']');
    if (close !== -1) name = name.slice(0, close + 1);
  } else {
    const colon = name.indexOf(':');
    if (colon !== -1 && name.indexOf(':', colon + 1) === -1) name = name.slice(0, colon);
    if (name.length > 1 && name.charCodeAt(name.length - 1) === 46 /* . */) name = name.slice(0, -1);
  }
  return name === '' ? undefined : name.toLowerCase();
}

/** ASCII letters to lower case, nothing else (a canonical path is ASCII anyway). */
function asciiLowerCase(s: string): string {
  return /[A-Z]/.test(s) ? s.replace(/[A-Z]+/g, (m) => m.toLowerCase()) : s;
}

/** The number of conditions a rule sets (precedence step 4). */
export function ruleConditions(match: Rule['match']): number {
  return (
    (match.methods !== undefined && match.methods.length > 0 ? 1 : 0) +
    (match.host !== undefined ? 1 : 0) +
    (match.headers !== undefined ? Object.keys(match.headers).length : 0) +
    (match.clientIps !== undefined ? 1 : 0) +
    (match.notClientIps !== undefined ? 1 : 0)
  );
}

const METHOD_BIT = new Map<string, number>(HTTP_METHODS.map((m, i) => [m, 1 << i]));
/** The bit of a request method outside HTTP_METHODS (TRACE, PROPFIND…): only "every method" rules accept it. */
const OTHER_METHOD_BIT = 1 << HTTP_METHODS.length;
/** The mask of a rule without `methods` (or with `[]`): every bit set. */
const EVERY_METHOD = -1;

/** A rule as the trie stores it: its precedence key flattened for cheap comparison, its conditions compiled. */
interface Entry {
  readonly priority: number;
  readonly literals: number;
  readonly stars: number;
  readonly globstar: 0 | 1;
  readonly conditions: number;
  readonly name: string;
  readonly id: string;
  /** bit per HTTP_METHODS index; EVERY_METHOD when the rule lists none */
  readonly methodMask: number;
  /** [name, value, name, value, …] of `match.headers`, names lowercase; undefined when none */
  readonly headers: readonly string[] | undefined;
  readonly clientIps: IpNetSet | undefined;
  readonly notClientIps: IpNetSet | undefined;
  readonly compiled: CompiledRule;
}

/** < 0 when `a` takes precedence over `b`. */
function comparePrecedence(a: Entry, b: Entry): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.literals !== b.literals) return b.literals - a.literals;
  if (a.stars !== b.stars) return a.stars - b.stars;
  if (a.globstar !== b.globstar) return a.globstar - b.globstar;
  if (a.conditions !== b.conditions) return b.conditions - a.conditions;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  if (a.id !== b.id) return a.id < b.id ? -1 : 1;
  return 0;
}

/** One request as the search sees it: the client IP is read at most once, and only when a rule asks. */
class Lookup {
  ipRead = false;
  ip: string | undefined = undefined;
  constructor(
    readonly req: MatchRequest,
    readonly methodBit: number,
  ) {}

  clientIp(): string | undefined {
    if (!this.ipRead) {
      this.ipRead = true;
      this.ip = this.req.clientIp?.();
    }
    return this.ip;
  }
}

function accepts(entry: Entry, lookup: Lookup): boolean {
  if ((entry.methodMask & lookup.methodBit) === 0) return false;
  const headers = entry.headers;
  if (headers !== undefined) {
    const req = lookup.req;
    if (req.header === undefined) return false;
    for (let i = 0; i < headers.length; i += 2) {
      // called as a method: a request's facts may be an object whose `header` reads its own fields
      const values = req.header(headers[i]!);
      if (values === undefined || values.length !== 1 || values[0] !== headers[i + 1]) return false;
    }
  }
  if (entry.clientIps !== undefined || entry.notClientIps !== undefined) {
    const ip = lookup.clientIp();
    if (entry.clientIps !== undefined && (ip === undefined || !entry.clientIps.has(ip))) return false;
    if (entry.notClientIps !== undefined && ip !== undefined && entry.notClientIps.has(ip)) return false;
  }
  return true;
}

interface TrieNode {
  readonly literal: Map<string, TrieNode>;
  star: TrieNode | undefined;
  /** rules whose pattern ends exactly here, best first */
  readonly exact: Entry[];
  /** rules whose pattern ends here with `**` (zero or more further segments), best first */
  readonly rest: Entry[];
}

function newNode(): TrieNode {
  return { literal: new Map(), star: undefined, exact: [], rest: [] };
}

function insert(root: TrieNode, segments: readonly string[], entry: Entry): void {
  let node = root;
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i]!;
    if (segment === '**') {
      // checkRule guarantees `**` is last
      node.rest.push(entry);
      return;
    }
    if (segment === '*') {
      node.star ??= newNode();
      node = node.star;
    } else {
      let child = node.literal.get(segment);
      if (child === undefined) {
        child = newNode();
        node.literal.set(segment, child);
      }
      node = child;
    }
  }
  node.exact.push(entry);
}

function sortTrie(node: TrieNode): void {
  node.exact.sort(comparePrecedence);
  node.rest.sort(comparePrecedence);
  for (const child of node.literal.values()) sortTrie(child);
  if (node.star) sortTrie(node.star);
}

/** The first entry of a sorted list accepting the request, if it beats `best`; else `best`. */
function bestOf(list: readonly Entry[], lookup: Lookup, best: Entry | undefined): Entry | undefined {
  for (let i = 0; i < list.length; i++) {
    const entry = list[i]!;
    // sorted: once one entry loses to `best`, every later one does too
    if (best !== undefined && comparePrecedence(entry, best) >= 0) return best;
    if (accepts(entry, lookup)) return entry;
  }
  return best;
}

function search(
  node: TrieNode,
  segments: readonly string[],
  depth: number,
  lookup: Lookup,
  best: Entry | undefined,
): Entry | undefined {
  let found = best;
  if (node.rest.length > 0) found = bestOf(node.rest, lookup, found);
  if (depth === segments.length) {
    return node.exact.length > 0 ? bestOf(node.exact, lookup, found) : found;
  }
  const child = node.literal.get(segments[depth]!);
  if (child !== undefined) found = search(child, segments, depth + 1, lookup, found);
  if (node.star !== undefined) found = search(node.star, segments, depth + 1, lookup, found);
  return found;
}

/** `"<label>";q=…;w=…`: the numbers come from the one header-arithmetic module. */
function policyItemOf(label: string, spec: LimitSpec): string {
  return policyItem(headerItemName(label, ''), spec);
}

function tokenBucketLimit(
  name: string,
  label: string,
  bucket: { capacity: number; refill: number; period: string | number; maxDebt: number },
  cost: number,
  client: { by: 'ip' | 'header' | 'global'; name?: string },
): CompiledLimit {
  const spec = Object.freeze({
    algorithm: 'token-bucket' as const,
    capacity: bucket.capacity,
    refill: bucket.refill,
    periodMs: parseDuration(bucket.period),
    maxDebt: bucket.maxDebt,
  });
  return Object.freeze({
    name,
    spec,
    cost,
    clientBy: client.by,
    clientHeader: client.by === 'header' ? client.name?.toLowerCase() : undefined,
    label,
    policyItem: policyItemOf(label, spec),
  });
}

function compileLimits(rule: Rule): CompiledLimit[] {
  if ('limit' in rule) {
    const v1: RuleV1 = rule;
    return [tokenBucketLimit('', v1.name, { ...v1.limit, maxDebt: v1.maxDebt }, v1.cost, v1.client)];
  }
  if (!('limits' in rule)) return [];
  const v2: RuleV2 = rule;
  return v2.limits.map((limit) => {
    const label = `${v2.name}.${limit.name}`;
    switch (limit.algorithm) {
      case 'token-bucket':
        return tokenBucketLimit(limit.name, label, limit, limit.cost ?? v2.cost, limit.client);
      case 'sliding-window': {
        const windowMs = parseDuration(limit.window);
        const spec = Object.freeze({ algorithm: 'sliding-window' as const, max: limit.max, windowMs });
        return Object.freeze({
          name: limit.name,
          spec,
          cost: limit.cost ?? v2.cost,
          clientBy: limit.client.by,
          clientHeader: limit.client.by === 'header' ? limit.client.name?.toLowerCase() : undefined,
          label,
          policyItem: policyItemOf(label, spec),
        });
      }
      case 'concurrency': {
        const spec = Object.freeze({
          algorithm: 'concurrency' as const,
          max: limit.max,
          leaseMs: DEFAULT_SLOT_LEASE_MS,
        });
        return Object.freeze({
          name: limit.name,
          spec,
          cost: 1,
          clientBy: limit.client.by,
          clientHeader: limit.client.by === 'header' ? limit.client.name?.toLowerCase() : undefined,
          label,
          policyItem: policyItemOf(label, spec),
        });
      }
      default:
        throw new RuleCompileError(v2.name, [
          {
            field: 'limits',
            message: `algorithm "${(limit as { algorithm: string }).algorithm}" cannot be compiled`,
          },
        ]);
    }
  });
}

/**
 * How long a compiled concurrency slot is held at most, ms: the default UPSTREAM_TIMEOUT_MS (30 s) + 5 s.
 * A gateway replaces it with its own `UPSTREAM_TIMEOUT_MS + 5 s` (docs/lifecycle.md: the taking gateway sets it).
 */
export const DEFAULT_SLOT_LEASE_MS = 35_000;

/** What a rule charges at the response (`charge`), compiled. */
export interface CompiledCharge {
  readonly from: 'header' | 'duration' | 'bytes';
  /** from "header": the response header, lowercase */
  readonly header: string | undefined;
  /** from "duration": one token per this many ms of upstream time (rounded up) */
  readonly unitMs: number;
  /** from "bytes": one token per this many bytes of response body (rounded up) */
  readonly unitBytes: number;
  /** most one request may cost: `charge.max`, else the largest capacity + maxDebt or window max */
  readonly max: number;
}

function compileCharge(rule: Rule, limits: readonly CompiledLimit[]): CompiledCharge | undefined {
  if (!('charge' in rule) || rule.charge === undefined) return undefined;
  const charge = rule.charge;
  let largest = 0;
  for (const { spec } of limits) {
    if (spec.algorithm === 'token-bucket') largest = Math.max(largest, spec.capacity + spec.maxDebt);
    else if (spec.algorithm === 'sliding-window') largest = Math.max(largest, spec.max);
  }
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

interface CompiledEntry {
  compiled: CompiledRule;
  entry: Entry;
  segments: string[];
  caseInsensitive: boolean;
}

function compileRule(rule: Rule, index: number): CompiledEntry {
  const errors = checkRule(rule);
  if (errors.length > 0) throw new RuleCompileError(rule.name, errors);
  const limits = Object.freeze(compileLimits(rule));
  const specificity = pathSpecificity(rule.match.path);
  const conditions = ruleConditions(rule.match);
  const compiled: CompiledRule = Object.freeze({
    rule,
    index,
    id: rule.id,
    name: rule.name,
    priority: rule.priority,
    shadow: rule.shadow,
    format: 'limit' in rule ? 1 : 2,
    unlimited: 'unlimited' in rule && rule.unlimited === true,
    limits,
    policyHeader: limits.map((l) => l.policyItem).join(', '),
    charge: compileCharge(rule, limits),
    refundStatuses: compileRefund(rule),
    mode: 'mode' in rule && rule.mode === 'lease' ? 'lease' : 'exact',
    specificity: Object.freeze(specificity),
    conditions,
  });
  const match = rule.match;
  const methods = match.methods ?? [];
  let methodMask = methods.length === 0 ? EVERY_METHOD : 0;
  for (const method of methods) methodMask |= METHOD_BIT.get(method) ?? 0;
  if ((methodMask & METHOD_BIT.get('GET')!) !== 0) methodMask |= METHOD_BIT.get('HEAD')!;
  const headers =
    match.headers === undefined
      ? undefined
      : Object.entries(match.headers).flatMap(([name, value]) => [name.toLowerCase(), value]);
  const entry: Entry = Object.freeze({
    priority: rule.priority,
    literals: specificity[0],
    stars: specificity[1],
    globstar: specificity[2],
    conditions,
    name: rule.name,
    id: rule.id,
    methodMask,
    headers: headers === undefined || headers.length === 0 ? undefined : Object.freeze(headers),
    clientIps: match.clientIps === undefined ? undefined : compileIpNets(match.clientIps),
    notClientIps: match.notClientIps === undefined ? undefined : compileIpNets(match.notClientIps),
    compiled,
  });
  const caseInsensitive = match.caseInsensitive === true;
  let segments = pathSegments(canonicalRulePath(match.path));
  if (caseInsensitive) segments = segments.map(asciiLowerCase);
  return { compiled, entry, segments, caseInsensitive };
}

/** The rules of one kind of path comparison: every host, and per host. */
class HostTries {
  readonly anyHost = newNode();
  readonly byHost = new Map<string, TrieNode>();
  size = 0;

  add(host: string | undefined, segments: readonly string[], entry: Entry): void {
    let root = this.anyHost;
    if (host !== undefined) {
      root = this.byHost.get(host) ?? newNode();
      this.byHost.set(host, root);
    }
    insert(root, segments, entry);
    this.size++;
  }

  sort(): void {
    sortTrie(this.anyHost);
    for (const root of this.byHost.values()) sortTrie(root);
  }

  search(segments: readonly string[], lookup: Lookup, best: Entry | undefined): Entry | undefined {
    let found = search(this.anyHost, segments, 0, lookup, best);
    if (this.byHost.size > 0) {
      const host = requestHostKey(lookup.req.host);
      const hostRoot = host === undefined ? undefined : this.byHost.get(host);
      if (hostRoot !== undefined) found = search(hostRoot, segments, 0, lookup, found);
    }
    return found;
  }
}

/**
 * Compiles a rule snapshot into an immutable matcher. Throws `RuleCompileError` (code `RULE_INVALID`)
 * if an enabled rule breaks what `checkRule` checks, so a caller can keep its last good set.
 */
export function compileRules(rules: readonly Rule[]): CompiledRuleSet {
  const exact = new HostTries();
  const folded = new HostTries();
  const compiledRules: CompiledRule[] = [];
  for (const rule of rules) {
    if (!rule.enabled) continue;
    const { compiled, entry, segments, caseInsensitive } = compileRule(rule, compiledRules.length);
    compiledRules.push(compiled);
    (caseInsensitive ? folded : exact).add(rule.match.host?.toLowerCase(), segments, entry);
  }
  exact.sort();
  folded.sort();

  function match(req: MatchRequest): CompiledRule | undefined {
    const path = req.path.indexOf('%') === -1 ? req.path : decodeSubDelims(req.path);
    const segments = pathSegments(path);
    const lookup = new Lookup(req, METHOD_BIT.get(req.method) ?? OTHER_METHOD_BIT);
    let best = exact.search(segments, lookup, undefined);
    if (folded.size > 0) best = folded.search(segments.map(asciiLowerCase), lookup, best);
    return best?.compiled;
  }

  return Object.freeze({ match, size: compiledRules.length, rules: Object.freeze(compiledRules) });
}
