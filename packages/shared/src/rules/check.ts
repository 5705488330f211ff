/**
 * `checkRule`: what JSON Schema cannot say about a rule. Which fields go together (`limit` or `limits`
 * or `unlimited`; each limit's fields by its algorithm), path segments, header names that are not
 * object-prototype names, IPs and CIDRs, and each limit's own checks, which its algorithm's plug-in makes
 * (durations, a limit some request could pass).
 */

import { type Client, checkDuration, fail, type RuleFieldError } from '../format/fields.js';
import { canonicalRulePath, normalizePath } from '../http/normalize-path.js';
import type { AnyAlgorithm } from '../limiter/algorithms/index.js';
import {
  ALGORITHM_NAMES,
  ALGORITHMS,
  algorithmNamed,
  DEFAULT_ALGORITHM,
} from '../limiter/algorithms/index.js';
import { checkBucketAdmits } from '../limiter/algorithms/token-bucket/rule-format.js';
import { parseIpNet } from './ip-nets.js';
import type { RuleLimitInput } from './limit-schema.js';
import type { RuleInput, RuleMatch } from './schema.js';

/** Names a header lookup on a plain object would find on its prototype (`constructor`, `__proto__` …). */
const PROTOTYPE_NAMES: ReadonlySet<string> = new Set(
  [...Object.getOwnPropertyNames(Object.prototype), '__proto__'].map((n) => n.toLowerCase()),
);

/** True for a header name that must not be used (it is a property of every plain object). */
export function isPrototypeHeaderName(name: string): boolean {
  return PROTOTYPE_NAMES.has(name.toLowerCase());
}

/** Characters that make text display in another order than it is read (Trojan Source, CVE-2021-42574). */
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

type Errors = RuleFieldError[];

function checkPath(path: string, errors: Errors): void {
  const before = errors.length;
  if (BIDI_CONTROLS.test(path)) {
    fail(
      errors,
      'match.path',
      'must not contain bidirectional control characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C)',
    );
  }
  if (LONE_SURROGATE.test(path)) fail(errors, 'match.path', 'must be well-formed Unicode (a lone surrogate)');
  const segments = path.split('/').slice(1);
  // a single trailing slash is allowed and means the same as none (see pathSegments)
  if (segments.length > 1 && segments[segments.length - 1] === '') segments.pop();
  segments.forEach((segment, i) => {
    if (segment === '' && path !== '/') {
      fail(errors, 'match.path', 'must not contain empty segments (`//`)');
    } else if (segment === '.' || segment === '..') {
      fail(errors, 'match.path', 'must not contain `.` or `..` segments');
    } else if (segment === '**' && i !== segments.length - 1) {
      fail(errors, 'match.path', '`**` is only allowed as the final segment');
    }
  });
  if (errors.length > before) return;
  // A rule for a path the gateway refuses on the wire (`;`, a trailing dot, a look-alike slash…)
  // could never match anything: say so now rather than store a rule that silently does nothing.
  const normalized = normalizePath(canonicalRulePath(path));
  if (!normalized.ok) {
    fail(
      errors,
      'match.path',
      `no request could ever match it: the gateway refuses such paths with 400 (${normalized.code}: ${normalized.message})`,
    );
  }
}

function checkMatch(match: RuleMatch, errors: Errors): void {
  checkPath(match.path, errors);
  if (match.headers !== undefined) {
    const seen = new Map<string, string>();
    for (const name of Object.keys(match.headers)) {
      const field = `match.headers.${name}`;
      const lower = name.toLowerCase();
      if (isPrototypeHeaderName(name)) {
        fail(
          errors,
          field,
          'is not allowed as a header name (it names a property of every JavaScript object)',
        );
      } else if (seen.has(lower)) {
        fail(
          errors,
          field,
          `names the same header as "${seen.get(lower)}" (header names are case-insensitive)`,
        );
      }
      seen.set(lower, name);
    }
  }
  if (match.claims !== undefined) {
    for (const name of Object.keys(match.claims)) {
      if (isPrototypeHeaderName(name)) {
        fail(
          errors,
          `match.claims.${name}`,
          'is not allowed as a claim name (it names a property of every JavaScript object)',
        );
      }
    }
  }
  for (const key of ['clientIps', 'notClientIps'] as const) {
    match[key]?.forEach((value, i) => {
      const net = parseIpNet(value);
      if (typeof net === 'string') fail(errors, `match.${key}.${i}`, net);
    });
  }
}

function checkClient(client: Client | undefined, at: string, errors: Errors): void {
  if (client === undefined) return;
  if (client.by === 'header' && !client.name) {
    fail(errors, `${at}.name`, `is required when ${at}.by is "header"`);
  }
  if (client.by !== 'header' && client.name !== undefined) {
    fail(errors, `${at}.name`, `is only allowed when ${at}.by is "header"`);
  }
  if (client.by !== 'header' && client.secret !== undefined) {
    fail(errors, `${at}.secret`, `is only allowed when ${at}.by is "header"`);
  }
  if (client.by !== 'jwt' && client.claim !== undefined) {
    fail(errors, `${at}.claim`, `is only allowed when ${at}.by is "jwt"`);
  }
  if (client.claim !== undefined && isPrototypeHeaderName(client.claim)) {
    fail(
      errors,
      `${at}.claim`,
      'is not allowed as a claim name (it names a property of every JavaScript object)',
    );
  }
  if (client.name !== undefined && isPrototypeHeaderName(client.name)) {
    fail(
      errors,
      `${at}.name`,
      'is not allowed as a header name (it names a property of every JavaScript object)',
    );
  }
}

/** Fields every limit has, whatever its algorithm. */
const COMMON_LIMIT_FIELDS = new Set(['name', 'client', 'algorithm']);

/** The fields a limit of `algorithm` may write, in the order an error lists them. */
function fieldsOf(algorithm: AnyAlgorithm): { required: readonly string[]; allowed: string[] } {
  const { fields, required, costless } = algorithm.rule;
  const optional = Object.keys(fields).filter((field) => !required.includes(field));
  return { required, allowed: costless === undefined ? [...optional, 'cost'] : optional };
}

function checkLimit(limit: RuleLimitInput, i: number, ruleCost: number | undefined, errors: Errors): void {
  const at = `limits.${i}`;
  const name = limit.algorithm ?? DEFAULT_ALGORITHM;
  const algorithm = algorithmNamed(name);
  if (algorithm === undefined) return; // the schema lists the names; a snapshot that skipped it gets no further
  const fields = fieldsOf(algorithm);
  const written = limit as Record<string, unknown>;
  for (const key of Object.keys(limit)) {
    if (written[key] === undefined || COMMON_LIMIT_FIELDS.has(key)) continue;
    if (fields.required.includes(key) || fields.allowed.includes(key)) continue;
    const why =
      key === 'cost' && algorithm.rule.costless !== undefined
        ? algorithm.rule.costless.refused
        : limit.algorithm === undefined
          ? `algorithm defaults to "${DEFAULT_ALGORITHM}"`
          : `the fields of ${name} are ${[...fields.required, ...fields.allowed].join(', ')}`;
    fail(errors, `${at}.${key}`, `is not a field of a ${name} limit (${why})`);
  }
  for (const key of fields.required) {
    if (written[key] === undefined) fail(errors, `${at}.${key}`, `is required for a ${name} limit`);
  }
  checkClient(limit.client, `${at}.client`, errors);
  const cost = limit.cost ?? ruleCost ?? 1;
  const costField = limit.cost !== undefined || ruleCost === undefined ? `${at}.cost` : 'cost';
  algorithm.rule.check(limit, { at, cost, costField }, errors);
}

/** The algorithms a rule's `charge` and `refund` can act on (those that take a cost), and why the others cannot. */
const COSTED = ALGORITHM_NAMES.filter((name) => ALGORITHMS[name].rule.costless === undefined);
const COSTLESS_WHY = ALGORITHM_NAMES.flatMap((name) => {
  const costless = ALGORITHMS[name].rule.costless;
  return costless === undefined ? [] : [`${name} ${costless.inLifecycle}`];
}).join(', ');

/** True when `limit` takes a cost (its algorithm is not a costless one such as concurrency). */
function takesCost(limit: RuleLimitInput): boolean {
  return algorithmNamed(limit.algorithm ?? DEFAULT_ALGORITHM)?.rule.costless === undefined;
}

function checkLifecycle(input: RuleInput, errors: Errors): void {
  const needs = `needs a ${COSTED.join(' or ')} limit`;
  const charge = input.charge;
  if (charge !== undefined) {
    const required = { header: 'header', duration: 'unitMs', bytes: 'unitBytes' } as const;
    for (const [from, key] of Object.entries(required)) {
      if (charge.from === from && charge[key] === undefined) {
        fail(errors, `charge.${key}`, `is required when charge.from is "${from}"`);
      } else if (charge.from !== from && charge[key] !== undefined) {
        fail(errors, `charge.${key}`, `is only allowed when charge.from is "${from}"`);
      }
    }
    if (charge.header !== undefined && isPrototypeHeaderName(charge.header)) {
      fail(
        errors,
        'charge.header',
        'is not allowed as a header name (it names a property of every JavaScript object)',
      );
    }
    if (input.limits !== undefined && !input.limits.some(takesCost)) {
      fail(errors, 'charge', `${needs} to charge (${COSTLESS_WHY})`);
    }
  }
  if (input.refund !== undefined && input.limits !== undefined && !input.limits.some(takesCost)) {
    fail(errors, 'refund', `${needs} to refund (${COSTLESS_WHY})`);
  }
}

/**
 * Checks what JSON Schema cannot say: which fields go together (`limit` or `limits` or `unlimited`,
 * each limit's fields by algorithm), `**` only as the final segment, no empty or dot segments, no
 * bidirectional controls, header names that are not object-prototype names, IPs and CIDRs, durations,
 * limits some request could pass. Run after schema validation; the
 * gateway runs it on every enabled rule of a snapshot too.
 */
export function checkRule(input: RuleInput): RuleFieldError[] {
  const errors: Errors = [];
  checkMatch(input.match, errors);
  const form = input.limits !== undefined ? 'limits' : input.limit !== undefined ? 'limit' : undefined;

  if (input.unlimited !== undefined && form !== undefined) {
    fail(errors, 'unlimited', `must not be set together with ${form}`);
  } else if (input.unlimited === true) {
    for (const key of ['client', 'cost', 'maxDebt', 'charge', 'refund', 'mode'] as const) {
      if (input[key] !== undefined) fail(errors, key, 'has no effect on an unlimited rule; remove it');
    }
  } else if (form === undefined) {
    fail(errors, 'limit', "is required: a rule needs 'limit', 'limits' or 'unlimited': true");
  }

  if (form === 'limits') {
    if (input.limit !== undefined) fail(errors, 'limit', 'must not be set together with limits');
    for (const key of ['client', 'maxDebt'] as const) {
      if (input[key] !== undefined) {
        fail(errors, key, 'must not be set together with limits (set it inside each limit)');
      }
    }
    const names = new Map<string, number>();
    input.limits!.forEach((limit, i) => {
      const first = names.get(limit.name);
      if (first !== undefined) {
        fail(
          errors,
          `limits.${i}.name`,
          `must be unique within the rule ("${limit.name}" is limits.${first} too)`,
        );
      } else names.set(limit.name, i);
      checkLimit(limit, i, input.cost, errors);
    });
  } else if (form === 'limit') {
    const limit = input.limit!;
    checkClient(input.client, 'client', errors);
    checkBucketAdmits(
      limit.capacity,
      input.maxDebt ?? limit.capacity,
      input.cost ?? 1,
      { capacity: 'limit.capacity', cost: 'cost', maxDebt: 'maxDebt' },
      errors,
    );
    checkDuration(limit.period, 'limit.period', errors);
  }
  if (input.unlimited !== true) checkLifecycle(input, errors);
  return dedupe(errors);
}

function dedupe(errors: RuleFieldError[]): RuleFieldError[] {
  const seen = new Set<string>();
  return errors.filter((e) => {
    const k = `${e.field}\0${e.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
