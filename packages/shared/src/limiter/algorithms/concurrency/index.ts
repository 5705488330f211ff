/**
 * The concurrency plug-in: its model (model.ts) and Lua twin (concurrency.lua), and what the rest of
 * Sluice asks of it. The slots held are the level: `r` is the free slots, a limit nobody asked holds
 * none, `GET /usage` reports the held ones as in flight, and it is never leased. Its slots live in a
 * sorted set of their own (`<limit name>:slots`: lease id → expiry), never in a string state.
 */
import { type Algorithm, fullInSeconds, outcomeLater } from '../algorithm.js';
import {
  CONCURRENCY_RETRY_AFTER_MS,
  type ConcurrencySpec,
  concurrencyModel,
  type SlotsState,
} from './model.js';
import { type CONCURRENCY_FIELDS, type ConcurrencyLimitSchema, concurrencyFormat } from './rule-format.js';

/** Free slots, never negative. */
function slotsLeft(spec: ConcurrencySpec, held: number): number {
  const left = spec.max - held;
  return left > 0 ? Math.floor(left) : 0;
}

/**
 * The reply of `ZRANGE <key> 0 -1 WITHSCORES`: `[leaseId, expiresAtMs, …]`. Expired leases stay in it
 * until the script next touches the key; the model leaves them out (`liveLeases`). Anything else
 * (no slot, another algorithm's state) is nothing.
 */
export function parseSlotsState(reply: unknown): SlotsState | undefined {
  if (!Array.isArray(reply) || reply.length === 0 || reply.length % 2 !== 0) return undefined;
  const leases = new Map<string, number>();
  for (let i = 0; i < reply.length; i += 2) {
    const expiresAtMs = Number(reply[i + 1]);
    if (!Number.isFinite(expiresAtMs)) return undefined;
    leases.set(String(reply[i]), expiresAtMs);
  }
  return { leases };
}

export const concurrency: Algorithm<
  ConcurrencySpec,
  SlotsState,
  typeof CONCURRENCY_FIELDS,
  typeof ConcurrencyLimitSchema
> = {
  ...concurrencyModel,
  luaFile: 'concurrency/concurrency.lua',

  keyName: (limitName) => `${limitName}:slots`,
  redisState: { command: (key) => ['ZRANGE', key, '0', '-1', 'WITHSCORES'], parse: parseSlotsState },

  remaining: slotsLeft,
  // a free slot is there now; else one may come back any moment (a denial says Retry-After: 1)
  moreQuotaMs: (_spec, outcome) => (outcome.remaining > 0 ? 0 : CONCURRENCY_RETRY_AFTER_MS),
  // a quota of requests in flight has no window
  policyParameters: (spec) => `q=${spec.max};qu="concurrent-requests"`,
  idleLevel: () => 0,
  // the slots held stay as they were: nothing tells when one comes back
  carryForward: (outcome, spec, elapsedMs) =>
    outcomeLater(outcome, outcome.level, slotsLeft(spec, outcome.level), elapsedMs),
  usage: (_spec, outcome) => ({
    remaining: outcome.remaining,
    debt: 0,
    inFlight: outcome.level,
    fullInSeconds: fullInSeconds(outcome),
  }),

  leaseRequests: () => 0,
  leaseSpec: (spec) => spec,
  // never leased (leaseRequests is 0)
  leaseWaitMs: () => Number.POSITIVE_INFINITY,
  // slots are whole: each gateway keeps at least one, or a client could do nothing at all
  fairShare: (spec, gateways) => ({ ...spec, max: Math.max(1, Math.floor(spec.max / gateways)) }),
  chargeCeiling: () => 0,
  defaultRefundMax: () => 0,
  slots: {
    withLifetime: (spec, leaseMs) => ({ ...spec, leaseMs }),
    // as evaluateSlots then charge (taken) or hold: twin of takeAgain in concurrency.lua
    takeVerdict: (spec, held, taken) => {
      if (taken) return { allowed: true, level: held + 1, retryAfterMs: 0, resetMs: 0 };
      const allowed = held < spec.max;
      return { allowed, level: held, retryAfterMs: allowed ? 0 : CONCURRENCY_RETRY_AFTER_MS, resetMs: 0 };
    },
  },

  rule: concurrencyFormat,
};
