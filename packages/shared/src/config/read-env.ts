/**
 * Reads a table of environment variables (env-vars.ts) in one pass and collects every problem, one
 * line per bad variable, so an operator fixes them all at once. Values are trimmed; an empty value
 * counts as unset (docker-compose writes `VAR=` for a variable it passes through unset).
 */
import type { AnyEnvVar, EnvVar } from './env-vars.js';

export type EnvSource = Readonly<Record<string, string | undefined>>;
export type EnvSpec = Readonly<Record<string, AnyEnvVar>>;
export type EnvValues<S extends EnvSpec> = {
  -readonly [K in keyof S]: S[K] extends EnvVar<infer T> ? T : never;
};

/** Thrown at start with every problem of the environment; a process prints `problems`, one per line. */
export class ConfigError extends Error {
  readonly code = 'SLUICE_CONFIG_INVALID';
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** The environment read against one table: values, and the problems found so far. */
export class EnvReading<S extends EnvSpec> {
  readonly #spec: S;
  readonly #source: EnvSource;
  readonly #values = new Map<keyof S, unknown>();
  readonly #problems = new Map<keyof S, string>();

  constructor(spec: S, source: EnvSource) {
    this.#spec = spec;
    this.#source = source;
    for (const name of Object.keys(spec) as (keyof S & string)[]) {
      const variable = spec[name] as AnyEnvVar;
      const raw = this.raw(name);
      if (raw === undefined) {
        if (variable.required) {
          this.report(name, `is required${variable.example ? ` (e.g. ${variable.example})` : ''}`);
        } else {
          this.#values.set(name, variable.fallback);
        }
        continue;
      }
      const parsed = variable.parse(raw);
      if ('problem' in parsed) this.report(name, parsed.problem);
      else this.#values.set(name, parsed.value);
    }
  }

  /** The trimmed value as set; undefined when unset or empty. */
  raw(name: keyof S & string): string | undefined {
    const value = this.#source[name]?.trim();
    return value === undefined || value === '' ? undefined : value;
  }

  isSet(name: keyof S & string): boolean {
    return this.raw(name) !== undefined;
  }

  /** The variable's value (its default when unset); undefined when it has a problem. */
  get<K extends keyof S & string>(name: K): EnvValues<S>[K] | undefined {
    return this.#problems.has(name) ? undefined : (this.#values.get(name) as EnvValues<S>[K]);
  }

  /** True when none of `names` has a problem: cross-variable checks run only on good values. */
  ok(...names: (keyof S & string)[]): boolean {
    return names.every((name) => !this.#problems.has(name));
  }

  /**
   * Adds a problem (the text after `NAME: `). A variable keeps its first problem only: one line per
   * bad variable.
   */
  report(name: keyof S & string, problem: string): void {
    if (!this.#problems.has(name)) this.#problems.set(name, problem);
  }

  /** Every problem as printed, in the order the table declares the variables. */
  problems(): string[] {
    return (Object.keys(this.#spec) as (keyof S & string)[])
      .filter((name) => this.#problems.has(name))
      .map((name) => `${name}: ${this.#problems.get(name)}`);
  }

  /** Every value; throws `ConfigError` listing every problem if there is any. */
  values(): EnvValues<S> {
    const problems = this.problems();
    if (problems.length > 0) throw new ConfigError(problems);
    return Object.fromEntries(this.#values) as EnvValues<S>;
  }
}

/** Reads `source` (usually `process.env`) against `spec`. */
export function readEnv<S extends EnvSpec>(spec: S, source: EnvSource): EnvReading<S> {
  return new EnvReading(spec, source);
}
