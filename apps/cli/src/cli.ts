/**
 * `sluice-rules` (`pnpm rules …` at the repository root): the rules-file workflow as a command.
 * `runCli` takes its arguments, environment and output streams as parameters so tests run it in-process;
 * `rules.ts` is the thin executable around it.
 */
import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type ApplyOptions, applyRules, type StepOutcome } from './apply.js';
import { RulesApiClient, RulesApiError } from './client.js';
import { formatPlan } from './plan.js';
import { formatRulesFile, RulesFileError, type RulesFileFormat, readRulesFile } from './rules-file.js';

/** Process exit codes; part of the CLI's contract (README "Rules file workflow"). */
export const EXIT = {
  OK: 0,
  /** invalid file, API error, API unreachable, bad token */
  ERROR: 1,
  /** unknown command or option */
  USAGE: 2,
  /** a rule changed on the server since the plan; it was left as the other writer made it */
  CONFLICT: 3,
} as const;

export const DEFAULT_RULES_API_URL = 'http://127.0.0.1:8081';

export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: Record<string, string | undefined>;
  /** relative file paths resolve against this */
  cwd: string;
  /** runs between planning and writing (tests edit a rule concurrently here) */
  afterPlan?: ApplyOptions['afterPlan'];
}

export const USAGE = `Usage: pnpm rules <command> [options]

Commands:
  apply <file>          make the rules API match <file> (YAML or JSON; "-" reads stdin)
      --dry-run         print the plan and write nothing
      --prune           also delete the rules the file does not name
      --create-only     only create the rules the API lacks; never update or delete
  export                print every rule as a rules file, sorted by name
      --format <f>      yaml (default) or json
      -o, --output <p>  write to <p> instead of standard output

Options:
  --url <url>           rules API base URL (env RULES_API_URL, default ${DEFAULT_RULES_API_URL})
  --token <token>       bearer token (env RULES_API_TOKEN); writes need the admin token
  -h, --help            this help

Exit codes: 0 done or nothing to do, 1 error, 2 usage, 3 conflict (a rule changed meanwhile; not overwritten).
`;

class UsageError extends Error {}

export async function runCli(argv: string[], io: CliIo): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    io.stderr(`error: ${(err as Error).message}\n\n${USAGE}`);
    return EXIT.USAGE;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.stdout(USAGE);
    return EXIT.OK;
  }
  const client = new RulesApiClient({
    url: values.url ?? io.env.RULES_API_URL ?? DEFAULT_RULES_API_URL,
    token: values.token ?? io.env.RULES_API_TOKEN,
  });
  try {
    const [command, ...rest] = positionals;
    switch (command) {
      case 'apply':
        return await apply(client, rest, values, io);
      case 'export':
        return await exportRules(client, rest, values, io);
      default:
        throw new UsageError(
          command === undefined ? 'a command is required' : `unknown command "${command}"`,
        );
    }
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr(`error: ${err.message}\n\n${USAGE}`);
      return EXIT.USAGE;
    }
    if (err instanceof RulesFileError) {
      io.stderr(`error: ${err.message}\nNothing was written.\n`);
      return EXIT.ERROR;
    }
    if (err instanceof RulesApiError) {
      io.stderr(`error: ${err.message}\n`);
      return EXIT.ERROR;
    }
    const errno = err as NodeJS.ErrnoException;
    // file system errors (an -o path that cannot be written) are the user's to fix: no stack
    io.stderr(`error: ${typeof errno.code === 'string' ? errno.message : (errno.stack ?? String(err))}\n`);
    return EXIT.ERROR;
  }
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      'dry-run': { type: 'boolean' },
      prune: { type: 'boolean' },
      'create-only': { type: 'boolean' },
      format: { type: 'string' },
      output: { type: 'string', short: 'o' },
      url: { type: 'string' },
      token: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

type Values = ReturnType<typeof parse>['values'];

function onlyFor(command: string, values: Values, allowed: Array<keyof Values>): void {
  const commandOptions: Array<keyof Values> = ['dry-run', 'prune', 'create-only', 'format', 'output'];
  const wrong = commandOptions.filter((o) => values[o] !== undefined && !allowed.includes(o));
  if (wrong.length > 0) throw new UsageError(`--${wrong[0]} is not an option of "${command}"`);
}

async function apply(client: RulesApiClient, args: string[], values: Values, io: CliIo): Promise<number> {
  onlyFor('apply', values, ['dry-run', 'prune', 'create-only']);
  if (args.length !== 1) throw new UsageError('apply takes exactly one file');
  if (values.prune && values['create-only'])
    throw new UsageError('--prune and --create-only exclude each other');
  const file = args[0] === '-' ? '-' : resolve(io.cwd, args[0]!);
  const desired = await readRulesFile(file);
  const dryRun = values['dry-run'] ?? false;
  const result = await applyRules(client, desired, {
    dryRun,
    prune: values.prune ?? false,
    createOnly: values['create-only'] ?? false,
    afterPlan: io.afterPlan,
  });
  io.stdout(`Plan for ${client.url} (${args[0]}: ${desired.length} rules):\n${formatPlan(result.plan)}\n`);
  if (dryRun) {
    io.stdout('Dry run: nothing was written.\n');
    return EXIT.OK;
  }
  if (!result.plan.hasChanges) {
    io.stdout('Nothing to do.\n');
    return EXIT.OK;
  }
  for (const outcome of result.outcomes) io.stdout(`${describeOutcome(outcome)}\n`);
  const written = result.outcomes.filter((o) => o.status === 'done').length;
  io.stdout(`Applied: ${written} written, ${result.conflicts} conflicts, ${result.failures} failed.\n`);
  if (result.failures > 0) return EXIT.ERROR;
  if (result.conflicts > 0) {
    io.stderr(
      `${result.conflicts} rule(s) changed on the server while applying and were left as they are.\n` +
        'Export or re-run apply to see the current difference.\n',
    );
    return EXIT.CONFLICT;
  }
  return EXIT.OK;
}

const PAST = {
  create: 'created',
  update: 'updated',
  delete: 'deleted',
  unchanged: 'unchanged',
  keep: 'kept',
};

function describeOutcome(outcome: StepOutcome): string {
  const { step } = outcome;
  if (outcome.status === 'done') {
    const version = outcome.rule ? ` (version ${outcome.rule.version})` : '';
    return `  ${PAST[step.action]} ${step.name}${version}`;
  }
  return `  ${outcome.status.toUpperCase()} ${step.action} ${step.name}: ${outcome.message}`;
}

async function exportRules(
  client: RulesApiClient,
  args: string[],
  values: Values,
  io: CliIo,
): Promise<number> {
  onlyFor('export', values, ['format', 'output']);
  if (args.length > 0) throw new UsageError('export takes no arguments (use -o <file> to write a file)');
  const format = values.format ?? 'yaml';
  if (format !== 'yaml' && format !== 'json') throw new UsageError('--format must be yaml or json');
  const text = formatRulesFile(await client.listRules(), format as RulesFileFormat);
  if (values.output === undefined) io.stdout(text);
  else await writeFile(resolve(io.cwd, values.output), text);
  return EXIT.OK;
}
