/**
 * The rules file teams keep in git: YAML or JSON holding `{ rules: [ RuleInput, … ] }`.
 * Parsing validates every entry with the same schema as the rules API and reports all problems at
 * once, each with the entry and the field, so a bad file is fixed in one go and nothing is written.
 */
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import {
  DurationError,
  parseDuration,
  type Rule,
  type RuleFields,
  type RuleInput,
  type RuleLimit,
  type RuleLimitInput,
  type RuleMatch,
  validateRuleInput,
} from '@sluice/shared';
import { Document, isMap, isSeq, parseDocument } from 'yaml';

export type RulesFileFormat = 'yaml' | 'json';

export interface RulesFileProblem {
  /** where in the file, e.g. `rules[2].limit.period` */
  where: string;
  message: string;
}

export class RulesFileError extends Error {
  readonly code = 'RULES_FILE_INVALID';
  constructor(
    readonly source: string,
    readonly problems: RulesFileProblem[],
  ) {
    super(
      `${source}: ${problems.length} problem(s)\n${problems.map((p) => `  ${p.where}: ${p.message}`).join('\n')}`,
    );
    this.name = 'RulesFileError';
  }
}

/** `.json` is JSON; anything else is read as YAML (which also accepts JSON). */
export function formatOfPath(path: string): RulesFileFormat {
  return extname(path).toLowerCase() === '.json' ? 'json' : 'yaml';
}

/** Reads and validates a rules file; `-` reads standard input. Throws `RulesFileError`. */
export async function readRulesFile(path: string): Promise<RuleInput[]> {
  let text: string;
  try {
    text = path === '-' ? await readStdin() : await readFile(path, 'utf8');
  } catch (err) {
    throw new RulesFileError(path, [{ where: '(file)', message: (err as Error).message }]);
  }
  return parseRulesFile(text, path === '-' ? 'yaml' : formatOfPath(path), path === '-' ? '(stdin)' : path);
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Parses and validates file text. Throws `RulesFileError` listing every problem. */
export function parseRulesFile(text: string, format: RulesFileFormat, source = '(rules file)'): RuleInput[] {
  const data = parseText(text, format, source);
  const problems: RulesFileProblem[] = [];
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new RulesFileError(source, [
      { where: '(top level)', message: 'must be an object with a `rules` list' },
    ]);
  }
  for (const key of Object.keys(data)) {
    if (key !== 'rules')
      problems.push({ where: key, message: 'is not a known field (the file holds `rules` only)' });
  }
  const entries = (data as { rules?: unknown }).rules;
  if (!Array.isArray(entries)) {
    problems.push({ where: 'rules', message: 'must be a list of rules' });
    throw new RulesFileError(source, problems);
  }
  const rules: RuleInput[] = [];
  const firstIndexByName = new Map<string, number>();
  entries.forEach((entry, i) => {
    const name = (entry as { name?: unknown } | null)?.name;
    const label = typeof name === 'string' ? `rules[${i}] (${name})` : `rules[${i}]`;
    const result = validateRuleInput(entry);
    if (!result.ok) {
      for (const e of result.errors) {
        const where = e.field === '(body)' ? label : `${label}.${e.field}`;
        problems.push({ where, message: durationMessage(entry, e.field, e.message) });
      }
      return;
    }
    const first = firstIndexByName.get(result.value.name);
    if (first !== undefined) {
      problems.push({ where: `${label}.name`, message: `duplicates rules[${first}]: names must be unique` });
      return;
    }
    firstIndexByName.set(result.value.name, i);
    rules.push(result.value);
  });
  if (problems.length > 0) throw new RulesFileError(source, problems);
  return rules;
}

/** Fields holding a duration: `limit.period`, `limits.1.period`, `limits.0.window`. */
const DURATION_FIELD = /^(limit\.period|limits\.\d+\.(period|window))$/;

/** The schema says "must match a schema in anyOf" for a bad duration; the duration parser says why. */
function durationMessage(entry: unknown, field: string, fallback: string): string {
  if (!DURATION_FIELD.test(field)) return fallback;
  let value: unknown = entry;
  for (const key of field.split('.')) {
    value = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
  }
  if (typeof value !== 'string' && typeof value !== 'number') return fallback;
  try {
    parseDuration(value);
  } catch (err) {
    if (err instanceof DurationError) return err.message;
  }
  return fallback;
}

function parseText(text: string, format: RulesFileFormat, source: string): unknown {
  if (format === 'json') {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new RulesFileError(source, [{ where: '(json)', message: (err as Error).message }]);
    }
  }
  // YAML 1.2 core schema: `yes`/`on` stay strings, so a typo cannot silently become a boolean.
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new RulesFileError(
      source,
      doc.errors.map((e) => ({ where: '(yaml)', message: e.message.split('\n')[0] ?? e.message })),
    );
  }
  return doc.toJS();
}

/**
 * The writable fields of a stored rule as a file entry, in a stable key order, leaving out fields
 * equal to their default (cost 1, maxDebt = capacity, client by ip, algorithm token-bucket, enabled,
 * not shadow, priority 0, `caseInsensitive: false`) so exported files read as a person writes them.
 * Applying the result changes nothing. Every form: `limit`, `limits` and `unlimited`.
 */
export function toFileEntry(rule: Rule | RuleFields): RuleInput {
  // key order as in docs/rules.md, so diffs of exported files read naturally
  const entry: RuleInput = {
    name: rule.name,
    ...(rule.description !== undefined && rule.description !== null ? { description: rule.description } : {}),
    match: matchEntry(rule.match),
  };
  if ('unlimited' in rule) {
    entry.unlimited = true;
  } else if ('limit' in rule) {
    if (rule.client.by !== 'ip') entry.client = { ...rule.client };
    entry.limit = { ...rule.limit };
    if (rule.cost !== 1) entry.cost = rule.cost;
    if (rule.maxDebt !== rule.limit.capacity) entry.maxDebt = rule.maxDebt;
  } else {
    entry.limits = rule.limits.map(limitEntry);
    if (rule.cost !== 1) entry.cost = rule.cost;
  }
  if (!('unlimited' in rule)) {
    if (rule.charge !== undefined) entry.charge = { ...rule.charge };
    if (rule.refund !== undefined) entry.refund = { ...rule.refund, statuses: [...rule.refund.statuses] };
    if (rule.mode !== undefined && rule.mode !== 'exact') entry.mode = rule.mode;
  }
  if (!rule.enabled) entry.enabled = false;
  if (rule.shadow) entry.shadow = true;
  if (rule.priority !== 0) entry.priority = rule.priority;
  return entry;
}

function matchEntry(match: RuleMatch): RuleMatch {
  const entry: RuleMatch = { path: match.path };
  if (match.methods !== undefined && match.methods.length > 0) entry.methods = [...match.methods];
  if (match.host !== undefined && match.host !== null) entry.host = match.host;
  if (match.headers !== undefined) entry.headers = { ...match.headers };
  if (match.claims !== undefined) {
    entry.claims = Object.fromEntries(
      Object.entries(match.claims).map(([name, value]) => [name, Array.isArray(value) ? [...value] : value]),
    );
  }
  if (match.authenticated !== undefined) entry.authenticated = match.authenticated;
  if (match.clientIps !== undefined) entry.clientIps = [...match.clientIps];
  if (match.notClientIps !== undefined) entry.notClientIps = [...match.notClientIps];
  if (match.caseInsensitive === true) entry.caseInsensitive = true;
  return entry;
}

function limitEntry(limit: RuleLimit): RuleLimitInput {
  const entry: RuleLimitInput = { name: limit.name };
  if (limit.client.by !== 'ip') entry.client = { ...limit.client };
  if (limit.algorithm !== 'token-bucket') entry.algorithm = limit.algorithm;
  switch (limit.algorithm) {
    case 'token-bucket':
      entry.capacity = limit.capacity;
      entry.refill = limit.refill;
      entry.period = limit.period;
      if (limit.maxDebt !== limit.capacity) entry.maxDebt = limit.maxDebt;
      if (limit.cost !== undefined) entry.cost = limit.cost;
      break;
    case 'sliding-window':
      entry.max = limit.max;
      entry.window = limit.window;
      if (limit.cost !== undefined) entry.cost = limit.cost;
      break;
    case 'concurrency':
      entry.max = limit.max;
      break;
  }
  return entry;
}

/** A rules file holding `rules`, sorted by name. */
export function formatRulesFile(rules: ReadonlyArray<Rule | RuleFields>, format: RulesFileFormat): string {
  const entries = [...rules]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map(toFileEntry);
  if (format === 'json') return `${JSON.stringify({ rules: entries }, null, 2)}\n`;
  const doc = new Document({ rules: entries });
  // `match`, `client`, `limit` and each of `limits` on one line, as people write them:
  // `limit: { capacity: 5, … }`, `- { name: burst, capacity: 20, … }`
  const list = doc.get('rules', true);
  if (isSeq(list)) {
    for (const item of list.items) {
      if (!isMap(item)) continue;
      for (const key of ['match', 'client', 'limit', 'charge', 'refund']) {
        const value = item.get(key, true);
        if (isMap(value)) value.flow = true;
      }
      const limits = item.get('limits', true);
      if (isSeq(limits)) {
        for (const limit of limits.items) if (isMap(limit)) limit.flow = true;
      }
    }
  }
  return doc.toString({ lineWidth: 0, flowCollectionPadding: true });
}
