/**
 * The algorithm plug-ins, by the name a `LimitSpec` carries. Adding one: a folder with its model (an
 * `Algorithm`), its Lua snippet (registered in acquire.lua's ALGORITHMS under the same name, listed in
 * `ALGORITHM_LUA_FILES`) and its differential test; then a member of `LimitSpec`.
 */
import type { LimitSpec } from '../limits.js';
import type { Algorithm } from './algorithm.js';
import { concurrency } from './concurrency/model.js';
import { slidingWindow } from './sliding-window/model.js';
import { tokenBucket } from './token-bucket/model.js';

type AlgorithmTable = { readonly [A in LimitSpec as A['algorithm']]: Algorithm<A, unknown> };

export const ALGORITHMS: AlgorithmTable = {
  'token-bucket': tokenBucket,
  'sliding-window': slidingWindow,
  concurrency,
};

/** Each algorithm's Lua snippet, relative to this folder (spliced into acquire.lua). */
export const ALGORITHM_LUA_FILES: readonly string[] = [
  'token-bucket/token-bucket.lua',
  'sliding-window/sliding-window.lua',
  'concurrency/concurrency.lua',
];

/** The plug-in deciding `spec`. */
export function algorithmOf(spec: LimitSpec): Algorithm<LimitSpec, unknown> {
  return ALGORITHMS[spec.algorithm] as Algorithm<LimitSpec, unknown>;
}
