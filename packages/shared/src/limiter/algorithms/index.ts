/**
 * The algorithm plug-ins, by the name a `LimitSpec` carries: the one place that lists them, one line
 * each. Adding one is a folder (its model, its Lua snippet, which registers its factory in acquire.lua's
 * ALGORITHMS table under the same name and follows the contract written there, their differential
 * test, and an `index.ts` providing the whole `Algorithm`) and a line here: its spec then joins
 * `LimitSpec`, its limit the rule format, its Lua the script. registry.test.ts checks that every
 * plug-in provides all of it.
 */
import type { Algorithm } from './algorithm.js';
import { concurrency } from './concurrency/index.js';
import { slidingWindow } from './sliding-window/index.js';
import { tokenBucket } from './token-bucket/index.js';

export const ALGORITHMS = {
  'token-bucket': tokenBucket,
  'sliding-window': slidingWindow,
  concurrency,
} as const;

/** What a limit without `algorithm` is. */
export const DEFAULT_ALGORITHM = 'token-bucket' satisfies AlgorithmName;

export type AlgorithmName = keyof typeof ALGORITHMS;
/** A registered plug-in, with its own types (a union over the registry). */
export type RegisteredAlgorithm = (typeof ALGORITHMS)[AlgorithmName];
/** The spec of a registered plug-in (`LimitSpec` is all of them). */
export type RegisteredSpec = RegisteredAlgorithm extends infer A
  ? A extends Algorithm<infer Spec, infer _State, infer _Fields, infer _Stored>
    ? Spec
    : never
  : never;

/** A plug-in as code that takes any spec sees it (its state and rule fields are its own business). */
// biome-ignore lint/suspicious/noExplicitAny: see above
export type AnyAlgorithm = Algorithm<RegisteredSpec, any, any, any>;

/** The registered names, in the registry's order (the order of the rule format's fields). */
export const ALGORITHM_NAMES = Object.keys(ALGORITHMS) as AlgorithmName[];

/** Each algorithm's Lua snippet, relative to this folder (spliced into acquire.lua). */
export const ALGORITHM_LUA_FILES: readonly string[] = ALGORITHM_NAMES.map((name) => ALGORITHMS[name].luaFile);

/** The plug-in deciding `spec`. */
export function algorithmOf(spec: RegisteredSpec): AnyAlgorithm {
  return ALGORITHMS[spec.algorithm] as AnyAlgorithm;
}

/** The plug-in registered under `name`, or undefined (a name from outside: a rule, a snapshot). */
export function algorithmNamed(name: string): AnyAlgorithm | undefined {
  return Object.hasOwn(ALGORITHMS, name) ? (ALGORITHMS[name as AlgorithmName] as AnyAlgorithm) : undefined;
}

/** The limit part of a limit's store key (`limitKey`'s `limitName`): `<name>:slots` for a concurrency limit. */
export function limitKeyName(spec: RegisteredSpec, limitName: string): string {
  return algorithmOf(spec).keyName(limitName);
}
