/**
 * Where an engine gets its rules: the rules API (`RulesCache`, the default) or, for tests and
 * embedders, a set given in code (`StaticRules`). `createEngine(config, { rules })` (and `buildGateway`) take either.
 */
import { type CompiledRuleSet, compileRules, type Rule } from '@sluice/shared';

export interface RuleSetSnapshot {
  /** the rule set's version (the rules API's rule-set counter) */
  version: number;
  compiled: CompiledRuleSet;
}

export interface RulesSource {
  /** the rule set in force, or undefined before the first one */
  readonly current: RuleSetSnapshot | undefined;
  /** Starts loading; `onChange` is called once per new rule set, before it is served. */
  start(onChange: (snapshot: RuleSetSnapshot) => void): void;
  /** Resolves once the first rule set is loaded. */
  whenLoaded(): Promise<void>;
  stop(): Promise<void>;
}

/** Rules given in code: loaded at `start()`, replaced by `set()`. */
export class StaticRules implements RulesSource {
  #current: RuleSetSnapshot | undefined;
  #pending: RuleSetSnapshot;
  #onChange: ((snapshot: RuleSetSnapshot) => void) | undefined;
  readonly #loaded: Promise<void>;
  #resolveLoaded!: () => void;

  /** Compiles `rules` now, so a rule that cannot be compiled throws here, as the rules cache would refuse it. */
  constructor(rules: readonly Rule[], version = 1) {
    this.#pending = { version, compiled: compileRules(rules) };
    this.#loaded = new Promise((resolve) => {
      this.#resolveLoaded = resolve;
    });
  }

  get current(): RuleSetSnapshot | undefined {
    return this.#current;
  }

  start(onChange: (snapshot: RuleSetSnapshot) => void): void {
    if (this.#onChange !== undefined) return;
    this.#onChange = onChange;
    this.#apply(this.#pending);
  }

  /** Replaces the rule set (its version one more than the last), as a rules API change would. */
  set(rules: readonly Rule[]): void {
    const snapshot = { version: (this.#current ?? this.#pending).version + 1, compiled: compileRules(rules) };
    if (this.#onChange === undefined) this.#pending = snapshot;
    else this.#apply(snapshot);
  }

  whenLoaded(): Promise<void> {
    return this.#loaded;
  }

  async stop(): Promise<void> {}

  #apply(snapshot: RuleSetSnapshot): void {
    this.#onChange!(snapshot);
    this.#current = snapshot;
    this.#resolveLoaded();
  }
}
