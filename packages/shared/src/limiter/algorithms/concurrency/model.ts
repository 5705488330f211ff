/**
 * The concurrency limit (`"algorithm": "concurrency"`): at most `max` of a client's requests in flight,
 * in pure TypeScript with the clock passed in. `concurrency.lua` is its twin (a sorted set of lease ids
 * scored by expiry); the differential test checks that they agree.
 *
 * A slot is a lease: admission adds `leaseId` expiring `leaseMs` later (at a whole ms: `leaseExpiryMs`;
 * `leaseMs` is the taking gateway's UPSTREAM_TIMEOUT_MS + 5 s); while the exchange runs, the gateway
 * renews it (`settle` with `renew`: `leaseMs` from the renewal); the end of the exchange removes it
 * (`settle`). A lease whose expiry has come (`expiresAtMs <= now`) no longer counts and is purged on
 * every touch, so slots of a gateway killed mid-request come back by themselves, never later than their
 * expiry.
 *
 * A request takes exactly one slot (its cost is always 1). Admitted iff fewer than `max` slots are held.
 * A denial says `Retry-After: 1` (a slot may come back any moment: nothing to compute); `t` is 0.
 */
import type { Settlement } from '../../limits.js';
import {
  type AlgorithmModel,
  assertPositive,
  type Evaluation,
  LimitArgumentError,
  type Settled,
  type Verdict,
} from '../algorithm.js';

/**
 * At most `max` of a client's requests in flight: each admitted request holds a slot, a lease that the
 * end of its exchange gives back (`settle` with its `leaseId`), or that expires by itself `leaseMs`
 * after it was taken (a gateway that died gives nothing back).
 */
export interface ConcurrencySpec {
  readonly algorithm: 'concurrency';
  /** most slots held at once; an integer >= 1 */
  readonly max: number;
  /** how long a slot is held at most, ms (the taking gateway's UPSTREAM_TIMEOUT_MS + 5 s); > 0 */
  readonly leaseMs: number;
}

/** What a store keeps per limit and client: lease id → expiry (store clock, ms). Never mutated. */
export interface SlotsState {
  readonly leases: ReadonlyMap<string, number>;
}

/** The wait a concurrency denial reports, ms (docs/lifecycle.md: `Retry-After: 1`). */
export const CONCURRENCY_RETRY_AFTER_MS = 1_000;

/** Throws `LimitArgumentError` unless `max` is a whole number >= 1, `leaseMs` > 0 and the cost is 1. */
export function assertSlotsArguments(spec: Omit<ConcurrencySpec, 'algorithm'>, cost: number): void {
  if (!(Number.isInteger(spec.max) && spec.max >= 1)) {
    throw new LimitArgumentError(`max must be an integer >= 1, got ${spec.max}`);
  }
  assertPositive('leaseMs', spec.leaseMs);
  if (cost !== 1) throw new LimitArgumentError(`a concurrency check costs 1 slot, got ${cost}`);
}

/** The decision arithmetic of the plug-in (index.ts). */
export const concurrencyModel: AlgorithmModel<ConcurrencySpec, SlotsState> = {
  name: 'concurrency',
  assertArguments: assertSlotsArguments,
  luaArguments: (spec) => [String(spec.max), String(spec.leaseMs)],
  evaluate: evaluateSlots,
  settle: releaseSlot,
};

/** The leases of `state` that still count at `nowMs`. */
export function liveLeases(state: unknown, nowMs: number): Map<string, number> {
  const live = new Map<string, number>();
  if (!isSlotsState(state)) return live;
  for (const [id, expiresAtMs] of state.leases) if (expiresAtMs > nowMs) live.set(id, expiresAtMs);
  return live;
}

export function evaluateSlots(
  state: unknown,
  spec: Omit<ConcurrencySpec, 'algorithm'>,
  _cost: number,
  nowMs: number,
  leaseId?: string,
): Evaluation<SlotsState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const leases = liveLeases(state, nowMs);
  const held = leases.size;
  const allowed = held < spec.max;
  return {
    allowed,
    hold(): Verdict {
      return { allowed, level: held, retryAfterMs: allowed ? 0 : CONCURRENCY_RETRY_AFTER_MS, resetMs: 0 };
    },
    charge() {
      if (!allowed) throw new LimitArgumentError('charge() of a request this concurrency limit denies');
      if (leaseId === undefined || leaseId === '')
        throw new LimitArgumentError('a concurrency check needs a leaseId');
      leases.set(leaseId, leaseExpiryMs(nowMs, spec.leaseMs));
      return {
        verdict: { allowed, level: leases.size, retryAfterMs: 0, resetMs: 0 },
        state: { leases },
        ttlMs: lastExpiryMs(leases) - nowMs,
      };
    },
  };
}

/**
 * When a lease taken or renewed at `nowMs` expires: `leaseMs` later at a whole ms, rounded down (the ms
 * its Redis key's expiry ends at too), unless that is not after `nowMs` (a lease shorter than 1 ms).
 * Redis keeps a whole score as an integer; a fraction cost it a parse of every member's score at each
 * insert into the set (issue 16). Twin: `expiryOf` in concurrency.lua.
 */
export function leaseExpiryMs(nowMs: number, leaseMs: number): number {
  const atMs = Math.floor(nowMs + leaseMs);
  return atMs > nowMs ? atMs : nowMs + leaseMs;
}

/**
 * Gives the settlement's slot back (nothing when it expired already), or renews it (`renew`). A
 * give-back reports level 0: the script does not count what is left (one command per request saved;
 * nothing reads it).
 */
export function releaseSlot(state: unknown, settlement: Settlement, nowMs: number): Settled<SlotsState> {
  if (settlement.renew === true) return renewSlot(state, settlement, nowMs);
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const leases = liveLeases(state, nowMs);
  if (settlement.leaseId !== undefined) leases.delete(settlement.leaseId);
  return {
    level: 0,
    resetMs: 0,
    state: { leases },
    ttlMs: leases.size === 0 ? 0 : lastExpiryMs(leases) - nowMs,
  };
}

/**
 * Keeps the settlement's slot for another `leaseMs` from `nowMs`: the gateway holding a running
 * exchange renews it before it expires. A slot already expired (or given back) stays gone: it may
 * have been taken by another request since, and taking it again could put more than `max` in flight.
 */
export function renewSlot(state: unknown, settlement: Settlement, nowMs: number): Settled<SlotsState> {
  if (!Number.isFinite(nowMs)) throw new LimitArgumentError(`nowMs must be finite, got ${nowMs}`);
  const leases = liveLeases(state, nowMs);
  const leaseId = settlement.leaseId;
  if (leaseId !== undefined && leases.has(leaseId) && settlement.spec.algorithm === 'concurrency') {
    leases.set(leaseId, leaseExpiryMs(nowMs, settlement.spec.leaseMs));
  }
  return {
    level: leases.size,
    resetMs: 0,
    state: { leases },
    ttlMs: leases.size === 0 ? 0 : lastExpiryMs(leases) - nowMs,
  };
}

function lastExpiryMs(leases: ReadonlyMap<string, number>): number {
  let last = -Infinity;
  for (const expiresAtMs of leases.values()) if (expiresAtMs > last) last = expiresAtMs;
  return last;
}

function isSlotsState(state: unknown): state is SlotsState {
  return typeof state === 'object' && state !== null && (state as SlotsState).leases instanceof Map;
}
