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
 * Both are compared Unicode-folded (`matchingPath`: NFKC without zero-width characters), so a
 * `/secret/**` rule takes `/ｓecret/x` and `/se%E2%80%8Bcret/x`.
 * Escaped sub-delims, `:` and `@` (`%3A`, `%21`, …) match like the raw character, because upstreams
 * decode them: `/v1/items%3Abatch` is `/v1/items:batch` to them, and so to the rules. A single trailing slash is ignored on
 * both the pattern and the request, so `/a/` ≡ `/a`. Literal segments are case-sensitive unless the
 * rule says `match.caseInsensitive` (ASCII letters only); `*` is exactly one segment; a final `**` is
 * zero or more (`/a/**` matches `/a`, `/a/` and `/a/b/c`).
 * Headers: each `match.headers` entry holds only when the request carries that header exactly once with
 * exactly that value; a repeated header satisfies no condition (a client cannot pick the reading it likes).
 * Identity: `match.authenticated` holds when the request has (true) or lacks (false) a verified
 * bearer token; each `match.claims` entry when the verified token's claim equals one of its values
 * (or, a list claim, contains one). An unverified token has no claims.
 * Client IPs: `clientIps` holds when the client IP is in one of the nets, `notClientIps` when it is in
 * none; an unknown IP never satisfies `clientIps` and always satisfies `notClientIps`.
 *
 * Lookup walks a segment trie: its cost grows with the number of path segments (and the trie
 * branches a path can follow: one literal child and one `*` child per level) plus the conditions of the
 * candidate rules it tests, not with the number of rules. Each trie node keeps its rules pre-sorted by
 * precedence, so the first one whose method and conditions accept is the best of that node, and
 * scanning stops as soon as a rule cannot beat the best found so far. Rules are also indexed by host,
 * and case-insensitive rules live in tries of their own, searched only when such rules exist.
 *
 * What a matched rule carries (its limits, policy header, charge and refund) is compile-rule.ts's.
 */

import { canonicalRulePath, matchingPath } from '../http/normalize-path.js';
import { pathSegments } from '../http/path-segments.js';
import { type ClaimValue, claimMatches, claimOf, type VerifiedClaims } from '../identity/claims.js';
import { type CompiledRule, compileRule } from './compile-rule.js';
import { compileIpNets, type IpNetSet } from './ip-nets.js';
import { HTTP_METHODS, type Rule } from './schema.js';

export {
  type CompiledCharge,
  type CompiledLimit,
  type CompiledRule,
  DEFAULT_SLOT_LEASE_MS,
  RuleCompileError,
} from './compile-rule.js';
export { type PathSpecificity, pathSpecificity, ruleConditions } from './precedence.js';

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
  /**
   * the claims of the request's verified bearer token, undefined when it has none (or it failed
   * verification); called at most once per lookup, only when a candidate rule tests identity
   */
  claims?: () => VerifiedClaims | undefined;
}

export interface CompiledRuleSet {
  /** the rule that applies to the request, or undefined (proxy without limit) */
  match(req: MatchRequest): CompiledRule | undefined;
  /** some enabled rule reads a verified token (a `jwt` client, `match.claims`, `match.authenticated`) */
  readonly usesIdentity: boolean;
  /** number of rules that can match (enabled rules) */
  readonly size: number;
  /** the enabled rules, compiled, in input order */
  readonly rules: readonly CompiledRule[];
}

/** Escapes (upper-case hex, as the normaliser leaves them) of the characters a rule path holds raw. */
const SUB_DELIM_ESCAPE = /%(2[146-9A-C]|3[ABD]|40)/g;

/** `/v1/items%3Abatch` → `/v1/items:batch`; `%2F`, `%25` and non-ASCII escapes stay as they are. */
function decodeSubDelims(path: string): string {
  return path.replace(SUB_DELIM_ESCAPE, (_escape, hex: string) =>
    String.fromCharCode(Number.parseInt(hex, 16)),
  );
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
  /** [claim name, wanted value(s)] of `match.claims`; undefined when none */
  readonly claims: ReadonlyArray<readonly [string, ClaimValue | readonly ClaimValue[]]> | undefined;
  /** `match.authenticated`, undefined when the rule does not say */
  readonly authenticated: boolean | undefined;
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

  claimsRead = false;
  verified: VerifiedClaims | undefined = undefined;
  claims(): VerifiedClaims | undefined {
    if (!this.claimsRead) {
      this.claimsRead = true;
      this.verified = this.req.claims?.();
    }
    return this.verified;
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
  if (entry.authenticated !== undefined || entry.claims !== undefined) {
    // only a verified token's claims count (the front door never passes unverified ones)
    const claims = lookup.claims();
    if (entry.authenticated !== undefined && entry.authenticated !== (claims !== undefined)) return false;
    const wanted = entry.claims;
    if (wanted !== undefined) {
      if (claims === undefined) return false;
      for (let i = 0; i < wanted.length; i++) {
        const [name, values] = wanted[i]!;
        if (!claimMatches(claimOf(claims, name), values)) return false;
      }
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

interface TrieEntry {
  entry: Entry;
  segments: string[];
  caseInsensitive: boolean;
}

/** How the trie holds a compiled rule: where it sits, and its precedence key and conditions flattened. */
function trieEntryOf(compiled: CompiledRule): TrieEntry {
  const { rule, specificity, conditions } = compiled;
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
    claims:
      match.claims === undefined
        ? undefined
        : Object.freeze(
            Object.entries(match.claims).map(([name, value]) => Object.freeze([name, value] as const)),
          ),
    authenticated: match.authenticated,
    compiled,
  });
  const caseInsensitive = match.caseInsensitive === true;
  let segments = pathSegments(matchingPath(canonicalRulePath(match.path)));
  if (caseInsensitive) segments = segments.map(asciiLowerCase);
  return { entry, segments, caseInsensitive };
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
    const compiled = compileRule(rule, compiledRules.length);
    const { entry, segments, caseInsensitive } = trieEntryOf(compiled);
    compiledRules.push(compiled);
    (caseInsensitive ? folded : exact).add(rule.match.host?.toLowerCase(), segments, entry);
  }
  exact.sort();
  folded.sort();

  function match(req: MatchRequest): CompiledRule | undefined {
    // rules see the path Unicode-folded (SPEC §4): `/ｓecret` is limited as `/secret`
    const path = req.path.indexOf('%') === -1 ? req.path : decodeSubDelims(matchingPath(req.path));
    const segments = pathSegments(path);
    const lookup = new Lookup(req, METHOD_BIT.get(req.method) ?? OTHER_METHOD_BIT);
    let best = exact.search(segments, lookup, undefined);
    if (folded.size > 0) best = folded.search(segments.map(asciiLowerCase), lookup, best);
    return best?.compiled;
  }

  return Object.freeze({
    match,
    size: compiledRules.length,
    rules: Object.freeze(compiledRules),
    usesIdentity: compiledRules.some((rule) => rule.usesIdentity),
  });
}
