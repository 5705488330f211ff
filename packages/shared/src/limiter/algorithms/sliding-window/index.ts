/**
 * The sliding-window plug-in: its model (model.ts) and Lua twin (sliding-window.lua), and what the rest
 * of Sluice asks of a window. Its estimate is the level: `r` is the whole units left below `max`, a
 * window nobody asked is empty, a cached denial keeps its estimate (it can only have fallen since, so
 * `r` errs low), and it is never leased.
 */
import type { LimitOutcome } from '../../limits.js';
import { type Algorithm, fullInSeconds, outcomeLater } from '../algorithm.js';
import { windowSeconds } from '../whole-seconds.js';
import { type SlidingWindowSpec, slidingWindowModel, type WindowState } from './model.js';
import {
  type SLIDING_WINDOW_FIELDS,
  type SlidingWindowLimitSchema,
  slidingWindowFormat,
} from './rule-format.js';

/** Whole units left below `max`, never negative. */
function unitsLeft(spec: SlidingWindowSpec, estimate: number): number {
  const left = spec.max - estimate;
  return left > 0 ? Math.floor(left) : 0;
}

/**
 * Until `r` grows by one: the estimate `E` must fall to `max − (r + 1)`. An outcome carries `E` and the
 * time `R` until it is 0, not how `E` splits into this window's count and the previous one's, so this
 * is the slowest way `E` can fall (everything counted in this window: flat until the window ends, then
 * down to 0 over the next one) — never earlier than the truth, and exact when nothing was counted in
 * this window (`R` within one window: `E` falls in a straight line to 0 at `R`). Every other split
 * falls at least as fast at every moment.
 */
function untilOneMoreMs(spec: SlidingWindowSpec, outcome: LimitOutcome): number {
  const estimate = outcome.level;
  const target = spec.max - (outcome.remaining + 1);
  if (target < 0 || estimate <= target) return 0;
  const resetMs = outcome.resetMs;
  const left = target / estimate;
  const ms = resetMs <= spec.windowMs ? resetMs * (1 - left) : resetMs - spec.windowMs * left;
  return Math.min(resetMs, Math.ceil(ms));
}

/**
 * `"<windowIndex> <current> <previous> <tag>"`, as the Lua twin writes it ('%.17g' each, then the tag);
 * anything else (another algorithm's state, one written before tags) is nothing.
 */
export function parseWindowState(reply: unknown): WindowState | undefined {
  if (typeof reply !== 'string') return undefined;
  const parts = reply.split(' ');
  if (parts.length !== 4 || !parts[3]!.startsWith('W')) return undefined;
  const numbers = parts.slice(0, 3);
  if (numbers.some((part) => part === '' || !Number.isFinite(Number(part)))) return undefined;
  return {
    windowIndex: Number(parts[0]),
    current: Number(parts[1]),
    previous: Number(parts[2]),
    tag: parts[3]!,
  };
}

export const slidingWindow: Algorithm<
  SlidingWindowSpec,
  WindowState,
  typeof SLIDING_WINDOW_FIELDS,
  typeof SlidingWindowLimitSchema
> = {
  ...slidingWindowModel,
  luaFile: 'sliding-window/sliding-window.lua',

  keyName: (limitName) => limitName,
  redisState: { command: (key) => ['GET', key], parse: parseWindowState },

  remaining: unitsLeft,
  moreQuotaMs: untilOneMoreMs,
  policyParameters: (spec) => `q=${Math.floor(spec.max)};w=${windowSeconds(spec.windowMs)}`,
  idleLevel: () => 0,
  carryForward: (outcome, spec, elapsedMs) =>
    outcomeLater(outcome, outcome.level, unitsLeft(spec, outcome.level), elapsedMs),
  usage: (_spec, outcome) => ({
    remaining: outcome.remaining,
    debt: 0,
    inFlight: 0,
    fullInSeconds: fullInSeconds(outcome),
  }),

  leaseRequests: () => 0,
  leaseSpec: (spec) => spec,
  // never leased (leaseRequests is 0)
  leaseWaitMs: () => Number.POSITIVE_INFINITY,
  // at least one whole unit: a share below it would never admit a request of cost 1
  fairShare: (spec, gateways) => ({ ...spec, max: Math.max(spec.max / gateways, Math.min(spec.max, 1)) }),
  chargeCeiling: (spec) => spec.max,
  defaultRefundMax: (spec) => spec.max,

  rule: slidingWindowFormat,
};
