/**
 * Which rule applies to a request (SPEC §2 "Which rule applies"), compiled once per rule-set refresh.
 *
 * Precedence, best first:
 *   1. enabled rules only (a disabled rule is left out at compile time);
 *   2. highest `priority`;
 *   3. most specific path, by the tuple `PathSpecificity = [literals, stars, globstar]` compared as
 *      (more literal segments) → (fewer `*` segments) → (no final `**` before a final `**`).
 *      Lexicographic: `/a/b/**` (2 literals) beats `/a/*` (1 literal); `/a/**` beats `/*\/b`
 *      (same literals, fewer `*`); `/a` beats `/a/**`;
 *   4. smallest `name` by plain string comparison (UTF-16 code units, like `<`);
 *   5. smallest `id` — names are unique in the rules API, this only keeps a broken snapshot deterministic.
 *
 * Method: a rule without `methods` (or with `[]`) accepts every method; otherwise the request method
 * must be listed exactly (case-sensitive; request methods arrive uppercase). HEAD does NOT match a rule
 * that lists only GET: list HEAD too if it should be limited.
 * Host: a rule without `host` accepts every host (and requests without one). Otherwise the request's
 * Host, lowercased and without its `:port` (`[::1]:8080` → `[::1]`), must equal the rule's host.
 * Path: the matcher receives a normalised path; a single trailing slash is ignored on both the pattern
 * and the request, so `/a/` ≡ `/a`. Literal segments are case-sensitive; `*` is exactly one segment;
 * a final `**` is zero or more (`/a/**` matches `/a`, `/a/` and `/a/b/c`).
 *
 * Lookup walks a segment trie: its cost grows with the number of path segments (and the trie
 * branches a path can follow: one literal child and one `*` child per level), not with the number of
 * rules. Each trie node keeps its rules pre-sorted by precedence, so the first one whose method fits
 * is the best of that node, and scanning stops as soon as a rule cannot beat the best found so far.
 * Rules are also indexed by host, so rules for other hosts are never looked at.
 */
import { pathSegments } from '../http/path-segments.js';
import type { BucketLimits } from '../limiter/store.js';
import { parseDuration } from './duration.js';
import { checkRule, HTTP_METHODS, type Rule, type RuleFieldError } from './schema.js';

/** `[literal segments, '*' segments, 1 if the pattern ends in '**' else 0]` of a rule's path pattern. */
export type PathSpecificity = readonly [literals: number, stars: number, globstar: 0 | 1];

/** What the gateway needs per request, computed once per rule-set refresh. */
export interface CompiledRule {
  readonly rule: Rule;
  readonly id: string;
  readonly name: string;
  readonly priority: number;
  readonly shadow: boolean;
  readonly limits: Readonly<BucketLimits>;
  /** tokens one request takes */
  readonly cost: number;
  readonly clientBy: Rule['client']['by'];
  /** lowercase header name when `clientBy` is `header`, else undefined */
  readonly clientHeader: string | undefined;
  /** seconds an empty bucket takes to refill to capacity, rounded up (the policy's `w`) */
  readonly windowSec: number;
  /** the full `RateLimit-Policy` value: `"<name>";q=<capacity>;w=<windowSec>` */
  readonly policyHeader: string;
  readonly specificity: PathSpecificity;
}

export interface MatchRequest {
  /** uppercase HTTP method */
  method: string;
  /** the Host header as received (any case, maybe with `:port`); undefined when absent */
  host: string | undefined;
  /** normalised path: starts with `/`, no `//`, no dot segments */
  path: string;
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

/** Largest sf-integer (RFC 9651); bounds `w` for absurdly slow refills. */
const MAX_SF_INTEGER = 999_999_999_999_999;

/** Seconds to refill `capacity` from empty at `refill` tokens per `periodMs`, rounded up, ≥ 1. */
export function refillWindowSec(limits: Pick<BucketLimits, 'capacity' | 'refill' | 'periodMs'>): number {
  const exactSec = (limits.capacity * limits.periodMs) / (limits.refill * 1000);
  // Shave one part in 1e12 so float noise (60.00000000000001) does not round up a whole second.
  const sec = Math.ceil(exactSec * (1 - 1e-12));
  return Math.min(Math.max(sec, 1), MAX_SF_INTEGER);
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
 * The lowercase host a request names, without port: `Example.COM:8080` → `example.com`,
 * `[::1]:8080` → `[::1]`. A bare IPv6 address (several colons, no brackets) is kept whole.
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
  }
  return name.toLowerCase();
}

const METHOD_BIT = new Map<string, number>(HTTP_METHODS.map((m, i) => [m, 1 << i]));
/** The bit of a request method outside HTTP_METHODS (TRACE, PROPFIND…): only "every method" rules accept it. */
const OTHER_METHOD_BIT = 1 << HTTP_METHODS.length;
/** The mask of a rule without `methods` (or with `[]`): every bit set. */
const EVERY_METHOD = -1;

/** A rule as the trie stores it: its precedence key flattened for cheap comparison. */
interface Entry {
  readonly priority: number;
  readonly literals: number;
  readonly stars: number;
  readonly globstar: 0 | 1;
  readonly name: string;
  readonly id: string;
  /** bit per HTTP_METHODS index; EVERY_METHOD when the rule lists none */
  readonly methodMask: number;
  readonly compiled: CompiledRule;
}

/** < 0 when `a` takes precedence over `b`. */
function comparePrecedence(a: Entry, b: Entry): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.literals !== b.literals) return b.literals - a.literals;
  if (a.stars !== b.stars) return a.stars - b.stars;
  if (a.globstar !== b.globstar) return a.globstar - b.globstar;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  if (a.id !== b.id) return a.id < b.id ? -1 : 1;
  return 0;
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

/** The first entry of a sorted list accepting the method, if it beats `best`; else `best`. */
function bestOf(list: readonly Entry[], methodBit: number, best: Entry | undefined): Entry | undefined {
  for (let i = 0; i < list.length; i++) {
    const entry = list[i]!;
    // sorted: once one entry loses to `best`, every later one does too
    if (best !== undefined && comparePrecedence(entry, best) >= 0) return best;
    if ((entry.methodMask & methodBit) !== 0) return entry;
  }
  return best;
}

function search(
  node: TrieNode,
  segments: readonly string[],
  depth: number,
  methodBit: number,
  best: Entry | undefined,
): Entry | undefined {
  let found = best;
  if (node.rest.length > 0) found = bestOf(node.rest, methodBit, found);
  if (depth === segments.length) {
    return node.exact.length > 0 ? bestOf(node.exact, methodBit, found) : found;
  }
  const child = node.literal.get(segments[depth]!);
  if (child !== undefined) found = search(child, segments, depth + 1, methodBit, found);
  if (node.star !== undefined) found = search(node.star, segments, depth + 1, methodBit, found);
  return found;
}

function compileRule(rule: Rule): { compiled: CompiledRule; entry: Entry; segments: string[] } {
  const errors = checkRule(rule);
  if (errors.length > 0) throw new RuleCompileError(rule.name, errors);
  const periodMs = parseDuration(rule.limit.period);
  const limits: BucketLimits = Object.freeze({
    capacity: rule.limit.capacity,
    refill: rule.limit.refill,
    periodMs,
    maxDebt: rule.maxDebt,
  });
  const windowSec = refillWindowSec(limits);
  const specificity = pathSpecificity(rule.match.path);
  const compiled: CompiledRule = Object.freeze({
    rule,
    id: rule.id,
    name: rule.name,
    priority: rule.priority,
    shadow: rule.shadow,
    limits,
    cost: rule.cost,
    clientBy: rule.client.by,
    clientHeader: rule.client.by === 'header' ? rule.client.name?.toLowerCase() : undefined,
    windowSec,
    policyHeader: `"${rule.name}";q=${rule.limit.capacity};w=${windowSec}`,
    specificity: Object.freeze(specificity),
  });
  const methods = rule.match.methods ?? [];
  let methodMask = methods.length === 0 ? EVERY_METHOD : 0;
  for (const method of methods) methodMask |= METHOD_BIT.get(method) ?? 0;
  const entry: Entry = Object.freeze({
    priority: rule.priority,
    literals: specificity[0],
    stars: specificity[1],
    globstar: specificity[2],
    name: rule.name,
    id: rule.id,
    methodMask,
    compiled,
  });
  return { compiled, entry, segments: pathSegments(rule.match.path) };
}

/**
 * Compiles a rule snapshot into an immutable matcher. Throws `RuleCompileError` (code `RULE_INVALID`)
 * if an enabled rule breaks the path/client/period rules, so a caller can keep its last good set.
 */
export function compileRules(rules: readonly Rule[]): CompiledRuleSet {
  const anyHost = newNode();
  const byHost = new Map<string, TrieNode>();
  const compiledRules: CompiledRule[] = [];
  for (const rule of rules) {
    if (!rule.enabled) continue;
    const { compiled, entry, segments } = compileRule(rule);
    compiledRules.push(compiled);
    const host = rule.match.host?.toLowerCase();
    let root = anyHost;
    if (host !== undefined) {
      root = byHost.get(host) ?? newNode();
      byHost.set(host, root);
    }
    insert(root, segments, entry);
  }
  sortTrie(anyHost);
  for (const root of byHost.values()) sortTrie(root);

  function match(req: MatchRequest): CompiledRule | undefined {
    const segments = pathSegments(req.path);
    const methodBit = METHOD_BIT.get(req.method) ?? OTHER_METHOD_BIT;
    let best = search(anyHost, segments, 0, methodBit, undefined);
    if (byHost.size > 0) {
      const host = requestHostKey(req.host);
      const hostRoot = host === undefined ? undefined : byHost.get(host);
      if (hostRoot !== undefined) best = search(hostRoot, segments, 0, methodBit, best);
    }
    return best?.compiled;
  }

  return Object.freeze({ match, size: compiledRules.length, rules: Object.freeze(compiledRules) });
}
