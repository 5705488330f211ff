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
        problems.push({
          where,
          message: e.field === 'limit.period' ? periodMessage(entry, e.message) : e.message,
        });
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

/** The schema says "must match a schema in anyOf" for a bad period; the duration parser says why. */
function periodMessage(entry: unknown, fallback: string): string {
  const period = (entry as { limit?: { period?: unknown } }).limit?.period;
  if (typeof period !== 'string' && typeof period !== 'number') return fallback;
  try {
    parseDuration(period);
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
 * equal to their default (cost 1, maxDebt = capacity, enabled, not shadow, priority 0, client by ip)
 * so exported files stay short. Applying the result changes nothing.
 */
export function toFileEntry(rule: Rule | RuleFields): RuleInput {
  const entry: RuleInput = { name: rule.name, match: { path: rule.match.path }, limit: { ...rule.limit } };
  if (rule.description !== undefined && rule.description !== null) entry.description = rule.description;
  if (rule.match.methods !== undefined && rule.match.methods.length > 0)
    entry.match.methods = rule.match.methods;
  if (rule.match.host !== undefined && rule.match.host !== null) entry.match.host = rule.match.host;
  if (rule.client.by !== 'ip') entry.client = { ...rule.client };
  if (rule.cost !== 1) entry.cost = rule.cost;
  if (rule.maxDebt !== rule.limit.capacity) entry.maxDebt = rule.maxDebt;
  if (!rule.enabled) entry.enabled = false;
  if (rule.shadow) entry.shadow = true;
  if (rule.priority !== 0) entry.priority = rule.priority;
  // key order as in SPEC §2, so diffs of exported files read naturally
  const { name, description, match, client, limit, cost, maxDebt, enabled, shadow, priority } = entry;
  return Object.fromEntries(
    Object.entries({
      name,
      description,
      match,
      client,
      limit,
      cost,
      maxDebt,
      enabled,
      shadow,
      priority,
    }).filter(([, v]) => v !== undefined),
  ) as RuleInput;
}

/** A rules file holding `rules`, sorted by name. */
export function formatRulesFile(rules: ReadonlyArray<Rule | RuleFields>, format: RulesFileFormat): string {
  const entries = [...rules]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map(toFileEntry);
  if (format === 'json') return `${JSON.stringify({ rules: entries }, null, 2)}\n`;
  const doc = new Document({ rules: entries });
  // `match`, `client` and `limit` on one line each, as people write them: `limit: { capacity: 5, … }`
  const list = doc.get('rules', true);
  if (isSeq(list)) {
    for (const item of list.items) {
      if (!isMap(item)) continue;
      for (const key of ['match', 'client', 'limit']) {
        const value = item.get(key, true);
        if (isMap(value)) value.flow = true;
      }
    }
  }
  return doc.toString({ lineWidth: 0, flowCollectionPadding: true });
}
