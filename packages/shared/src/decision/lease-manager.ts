/**
 * Lease mode (`"mode": "lease"`): this gateway takes a rule's token-bucket tokens from the store in
 * advance, a few requests' worth at a time, and admits requests locally while the lease lasts.
 *
 * Why it never admits more than exact mode: a lease is one ordinary `acquire` of the same keys with
 * cost = (requests in the lease) × (each request's cost), so the bucket decides it under its own rules;
 * a lease is taken with `maxDebt` 0, so it never overdraws (only an exact decision may, as in exact
 * mode). Every admitted token was therefore taken from the bucket first, and the bucket's bound
 * (capacity + maxDebt + rate·T over any span) holds for the tokens taken. What lease mode may do is deny
 * while another gateway holds unused tokens: at most the tokens outstanding in leases.
 *
 * A lease lasts at most `leaseMs`; its unused tokens then go back to the bucket (`settle` with a
 * negative delta, capped at capacity by the bucket), and on `close()`. A lease in use is topped up
 * (one more `acquire`) when a quarter of it is left, so a steady stream never waits for the store; the
 * top-up restarts its `leaseMs`. Its size follows this key's own
 * recent rate on this gateway (an EWMA of requests per ms, sampled at each new lease): enough for about
 * `leaseMs` of traffic, at least 1 request, at most what the rule allows (`leaseRequestsOf`). Requests
 * that arrive while a lease is being fetched wait for it (one store call for all of them).
 *
 * At its limit (SPEC §6, "Lease mode at its limit"): when the bucket cannot give a lease, the denial
 * itself says what the bucket holds, so the manager knows when a useful lease will be there: not before
 * one request's tokens have come back (until then every request of this key is one the bucket had no
 * token for), and not before `leaseMs` of refill, so that a key held at its limit costs about one store
 * call per `leaseMs` whatever its traffic. Until then `take` answers the key's requests with that denial
 * from memory (Retry-After: until the next attempt), and then asks for what will have accrued, in one
 * call. Other gateways may take those tokens first: then it is denied again and waits again. It never
 * admits more than exact mode would: every admitted token is still taken from the bucket first.
 */
import { carryDenialForward, carryForward } from '../limiter/algorithms/carry-forward.js';
import { algorithmOf } from '../limiter/algorithms/index.js';
import { leaseSpecOf } from '../limiter/algorithms/lease.js';
import type { LimitCheck, LimitOutcome, LimitSpec, Settlement, StoreDecision } from '../limiter/limits.js';
import type { DecidedBy, PolicyAnswer } from './store-policy.js';

/** What the manager needs of a store: the store policy (`GuardedStore`) has exactly this. */
export interface LeaseStore {
  acquire(checks: readonly LimitCheck[]): Promise<PolicyAnswer>;
  settle(by: DecidedBy, settlements: readonly Settlement[]): Promise<unknown>;
}

/** Runs `fn` after `ms`; returns a function that cancels it. */
export type Schedule = (fn: () => void, ms: number) => () => void;

export interface LeaseManagerOptions {
  store: LeaseStore;
  /** how long a lease lasts at most, ms (LEASE_MS); also the horizon its size aims at */
  leaseMs: number;
  /** monotonic clock in ms (default `performance.now`) */
  now?: () => number;
  /** timers (default `setTimeout`, unref'd); tests pass a simulated one */
  schedule?: Schedule;
}

/** Token counts since the manager started, for metrics and tests (each summed over a lease's limits). */
export interface LeaseStats {
  /** leases the store granted */
  leases: number;
  /** lease attempts the store denied */
  leaseDenials: number;
  /** tokens taken from the store in leases */
  leasedTokens: number;
  /** tokens admitted locally from leases */
  admittedTokens: number;
  /** unused tokens sent back to the store */
  returnedTokens: number;
  /** unused tokens whose return failed (the store could not take them back: never over-admits) */
  lostTokens: number;
}

interface Lease {
  /** the request's checks the lease was taken for (each request's own cost) */
  readonly checks: readonly LimitCheck[];
  /** the store's decision that granted the lease (its latest top-up) */
  grant: StoreDecision;
  /** tokens one request takes, summed over the limits */
  readonly tokensPerRequest: number;
  /** requests left */
  remaining: number;
  /** requests the lease held after its latest top-up */
  granted: number;
  /**
   * topped up before it runs out; false for a lease taken at the limit (what had accrued): a top-up
   * would find the bucket empty, one more call for a denial
   */
  topUp: boolean;
  cancelExpiry: (() => void) | undefined;
}

/** A lease the bucket denied, remembered until a useful one can be had. */
interface AtLimit {
  /** the store's denial of the lease */
  readonly decision: StoreDecision;
  readonly specs: readonly LimitSpec[];
  /** monotonic ms when the denied lease was asked for (waits count from there, as the store's did) */
  readonly sentAtMs: number;
  /** monotonic ms of the next attempt */
  readonly untilMs: number;
}

interface KeyState {
  readonly key: string;
  lease: Lease | undefined;
  fetching: boolean;
  /** the rule's most requests per lease, as the last `take` said */
  maxRequests: number;
  /** requests waiting for the lease being fetched: each gets a lease's answer, or undefined (exact) */
  waiters: ((decision: StoreDecision | undefined) => void)[];
  /** the key is at its limit: the denial answered from memory until the next attempt */
  atLimit: AtLimit | undefined;
  /** the size of the next lease after a wait at the limit: what will have accrued (0: by rate) */
  accruedRequests: number;
  /** requests per ms on this key, EWMA; undefined until a first sample */
  rate: number | undefined;
  /** requests served from leases since `sampledAtMs` */
  served: number;
  /** monotonic ms of the last rate sample (the last lease fetch) */
  sampledAtMs: number;
}

const defaultSchedule: Schedule = (fn, ms) => {
  const timer = setTimeout(fn, ms);
  timer.unref();
  return () => clearTimeout(timer);
};

export class LeaseManager {
  readonly stats: LeaseStats = {
    leases: 0,
    leaseDenials: 0,
    leasedTokens: 0,
    admittedTokens: 0,
    returnedTokens: 0,
    lostTokens: 0,
  };
  readonly #store: LeaseStore;
  readonly #leaseMs: number;
  readonly #now: () => number;
  readonly #schedule: Schedule;
  readonly #keys = new Map<string, KeyState>();
  /** returns in flight, awaited by `close()` */
  readonly #returning = new Set<Promise<unknown>>();
  #outstandingTokens = 0;
  #closed = false;
  #cancelSweep: (() => void) | undefined;

  constructor(options: LeaseManagerOptions) {
    this.#store = options.store;
    this.#leaseMs = options.leaseMs;
    this.#now = options.now ?? (() => performance.now());
    this.#schedule = options.schedule ?? defaultSchedule;
  }

  /** Tokens this gateway holds in leases now, summed over every limit of every lease. */
  get outstandingTokens(): number {
    return this.#outstandingTokens;
  }

  /** Keys with lease state (a lease, a fetch, or a rate worth keeping). */
  get size(): number {
    return this.#keys.size;
  }

  /**
   * One request on `key` (its `denialKey`) with these `checks` (token buckets only, each with the
   * request's own cost), under a rule whose lease holds at most `maxRequests` requests:
   * - a StoreDecision (admitted) at once when the lease has a request left;
   * - a promise of one when a lease is being fetched, or of `undefined` if none could be had;
   * - `undefined`: decide this request exactly.
   */
  take(
    key: string,
    checks: readonly LimitCheck[],
    maxRequests: number,
  ): StoreDecision | Promise<StoreDecision | undefined> | undefined {
    if (this.#closed) return undefined;
    const nowMs = this.#now();
    let state = this.#keys.get(key);
    if (state === undefined) {
      state = {
        key,
        lease: undefined,
        fetching: false,
        maxRequests,
        waiters: [],
        atLimit: undefined,
        accruedRequests: 0,
        rate: undefined,
        served: 0,
        sampledAtMs: nowMs,
      };
      this.#keys.set(key, state);
      this.#sweepLater();
    }
    state.maxRequests = maxRequests;
    const lease = state.lease;
    if (lease !== undefined) {
      if (lease.remaining > 0) return this.#admit(state, lease);
      this.#end(state); // used up: nothing to give back
    }
    if (state.fetching) return new Promise((resolve) => state.waiters.push(resolve));
    const atLimit = state.atLimit;
    if (atLimit !== undefined) {
      if (nowMs < atLimit.untilMs) return deniedFromMemory(atLimit, nowMs);
      state.atLimit = undefined;
    }
    return new Promise((resolve) => {
      state.waiters.push(resolve);
      this.#fetch(state, checks, maxRequests);
    });
  }

  /** Ends every lease now (a rule-set change: a lease must not outlive the numbers it was taken under). */
  endAll(): void {
    for (const state of this.#keys.values()) this.#end(state);
  }

  /** Gives every unused token back and stops leasing; later `take`s answer `undefined`. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelSweep?.();
    for (const state of this.#keys.values()) this.#end(state);
    // fetches still in flight give their lease back as they land (see #fetch)
    while (this.#returning.size > 0 || [...this.#keys.values()].some((state) => state.fetching)) {
      await Promise.race([...this.#returning, new Promise((resolve) => setTimeout(resolve, 5))]);
    }
  }

  #admit(state: KeyState, lease: Lease): StoreDecision {
    lease.remaining--;
    state.served++;
    this.#outstandingTokens -= lease.tokensPerRequest;
    this.stats.admittedTokens += lease.tokensPerRequest;
    // a lease in use is topped up before it runs out, so a steady stream never waits for the store
    if (lease.topUp && 4 * lease.remaining < lease.granted && !state.fetching && !this.#closed) {
      this.#fetch(state, lease.checks, state.maxRequests);
    }
    const grant = lease.grant;
    const limits: LimitOutcome[] = new Array(grant.limits.length);
    for (let i = 0; i < limits.length; i++) {
      const outcome = grant.limits[i]!;
      // r: the bucket's level when the lease was taken, plus what this lease still holds
      const level = outcome.level + lease.remaining * lease.checks[i]!.cost;
      limits[i] = {
        allowed: true,
        level,
        remaining: level > 0 ? Math.floor(level) : 0,
        retryAfterMs: 0,
        resetMs: outcome.resetMs,
      };
    }
    return { allowed: true, limits, deniedIndex: -1, retryAfterMs: 0, atMs: grant.atMs };
  }

  /** One lease call for the key; those waiting are served when it lands (one fetch at a time per key). */
  #fetch(state: KeyState, checks: readonly LimitCheck[], maxRequests: number): void {
    if (state.fetching) return;
    state.fetching = true;
    const nowMs = this.#now();
    const elapsedMs = nowMs - state.sampledAtMs;
    if (elapsedMs > 0 && (state.served > 0 || state.rate !== undefined)) {
      const sample = state.served / Math.max(elapsedMs, 1);
      state.rate = state.rate === undefined ? sample : (state.rate + sample) / 2;
    }
    state.served = 0;
    state.sampledAtMs = nowMs;
    const wanted = state.rate === undefined ? 1 : Math.ceil(state.rate * this.#leaseMs);
    // a top-up keeps what the lease still holds within the rule's most (a quarter of capacity)
    const room = maxRequests - (state.lease?.remaining ?? 0);
    // after a wait at the limit: what has accrued (asking for more would be denied again); else enough
    // for about leaseMs of this key's traffic, and for every request waiting
    const atLimit = state.accruedRequests > 0;
    const size = atLimit ? state.accruedRequests : Math.max(wanted, state.waiters.length);
    state.accruedRequests = 0;
    const requests = Math.max(1, Math.min(room, size));
    const sentAtMs = nowMs;
    const leaseChecks: LimitCheck[] = checks.map((check) => ({
      key: check.key,
      // a lease never overdraws the bucket: only an exact decision may, as in exact mode
      spec: leaseSpecOf(check.spec),
      cost: check.cost * requests,
    }));
    let tokensPerRequest = 0;
    for (const check of checks) tokensPerRequest += check.cost;
    const exactly = () => {
      const waiters = state.waiters;
      state.waiters = [];
      for (const resolve of waiters) resolve(undefined);
    };
    this.#store.acquire(leaseChecks).then(
      (answer) => {
        state.fetching = false;
        if (answer.kind !== 'store') {
          // the failure policy answered: no lease; give back what a local store may have taken
          if (answer.kind === 'fallback' && answer.decision.allowed) {
            this.#giveBack('fallback', answer.decision, checks, requests, false);
          }
          exactly();
          return;
        }
        const decision = answer.decision;
        if (!decision.allowed) {
          this.stats.leaseDenials++;
          const atLimit = this.#atLimit(state, decision, leaseChecks, checks, sentAtMs, maxRequests);
          const waiters = state.waiters;
          state.waiters = [];
          const answer = deniedFromMemory(atLimit, this.#now());
          for (const resolve of waiters) resolve(answer);
          return;
        }
        this.stats.leases++;
        this.stats.leasedTokens += requests * tokensPerRequest;
        this.#outstandingTokens += requests * tokensPerRequest;
        let lease = state.lease;
        if (lease === undefined) {
          lease = {
            checks,
            grant: decision,
            tokensPerRequest,
            remaining: 0,
            granted: 0,
            topUp: !atLimit,
            cancelExpiry: undefined,
          };
          state.lease = lease;
        }
        // a top-up joins the lease in use: its unused tokens go back LEASE_MS after the last top-up
        lease.grant = decision;
        lease.remaining += requests;
        lease.granted = lease.remaining;
        lease.cancelExpiry?.();
        if (this.#closed) {
          this.#end(state);
          exactly();
          return;
        }
        const current = lease;
        lease.cancelExpiry = this.#schedule(() => {
          current.cancelExpiry = undefined;
          if (state.lease === current) this.#end(state);
        }, this.#leaseMs);
        const waiters = state.waiters;
        state.waiters = [];
        let i = 0;
        for (; i < waiters.length && lease.remaining > 0; i++) waiters[i]!(this.#admit(state, lease));
        if (i < waiters.length) {
          // more waited than the lease held: the rest wait for the next one
          state.waiters = waiters.slice(i);
          this.#end(state);
          this.#fetch(state, checks, maxRequests);
        }
      },
      () => {
        // a store call that threw (not a store failure, which the policy answers): decide exactly
        state.fetching = false;
        exactly();
      },
    );
  }

  /**
   * A denied lease: the next attempt waits until one request's tokens are back (before that the bucket
   * has none for any request of this key) and at least `leaseMs` of refill, and then asks for what will
   * have accrued by then (at least one request, at most the rule's most).
   */
  #atLimit(
    state: KeyState,
    denial: StoreDecision,
    leaseChecks: readonly LimitCheck[],
    checks: readonly LimitCheck[],
    sentAtMs: number,
    maxRequests: number,
  ): AtLimit {
    let waitMs = this.#leaseMs;
    for (let i = 0; i < checks.length; i++) {
      const spec = leaseChecks[i]!.spec;
      waitMs = Math.max(waitMs, algorithmOf(spec).leaseWaitMs(spec, denial.limits[i]!, checks[i]!.cost));
    }
    let accrued = maxRequests;
    for (let i = 0; i < checks.length; i++) {
      const later = carryForward(denial.limits[i]!, leaseChecks[i]!.spec, waitMs);
      accrued = Math.min(accrued, Math.floor(later.level / checks[i]!.cost));
    }
    state.accruedRequests = Math.max(1, accrued);
    const atLimit: AtLimit = {
      decision: denial,
      specs: leaseChecks.map((check) => check.spec),
      sentAtMs,
      untilMs: sentAtMs + waitMs,
    };
    state.atLimit = atLimit;
    return atLimit;
  }

  /** Ends the key's lease now: unused tokens back to the store. */
  #end(state: KeyState): void {
    const lease = state.lease;
    if (lease === undefined) return;
    state.lease = undefined;
    lease.cancelExpiry?.();
    lease.cancelExpiry = undefined;
    if (lease.remaining > 0) {
      this.#outstandingTokens -= lease.remaining * lease.tokensPerRequest;
      this.#giveBack('store', lease.grant, lease.checks, lease.remaining, true);
      lease.remaining = 0;
    }
  }

  /** Sends `requests` requests' worth of `checks` back to the store (`by`) that decided `grant`. */
  #giveBack(
    by: DecidedBy,
    grant: StoreDecision,
    checks: readonly LimitCheck[],
    requests: number,
    counted: boolean,
  ): void {
    let tokens = 0;
    const settlements: Settlement[] = checks.map((check) => {
      tokens += check.cost * requests;
      return {
        key: check.key,
        spec: check.spec,
        delta: -check.cost * requests,
        admittedAtMs: grant.atMs ?? 0,
      };
    });
    const returning = this.#store.settle(by, settlements).then(
      () => {
        if (counted) this.stats.returnedTokens += tokens;
      },
      () => {
        if (counted) this.stats.lostTokens += tokens;
      },
    );
    this.#returning.add(returning);
    returning.finally(() => this.#returning.delete(returning));
  }

  /** Forgets keys idle for 10 leases (no lease, no fetch), so idle clients cost no memory. */
  #sweepLater(): void {
    if (this.#cancelSweep !== undefined || this.#closed) return;
    this.#cancelSweep = this.#schedule(() => {
      this.#cancelSweep = undefined;
      const idleBeforeMs = this.#now() - 10 * this.#leaseMs;
      for (const [key, state] of this.#keys) {
        const waiting =
          state.atLimit !== undefined && state.atLimit.untilMs > idleBeforeMs + 10 * this.#leaseMs;
        if (state.lease === undefined && !state.fetching && !waiting && state.sampledAtMs < idleBeforeMs) {
          this.#keys.delete(key);
        }
      }
      if (this.#keys.size > 0) this.#sweepLater();
    }, 10 * this.#leaseMs);
  }
}

/**
 * The remembered denial at `nowMs`: each limit carried forward, the wait until the next attempt. What
 * accrues meanwhile is this key's next lease, not a request's: the request is told none is left.
 */
function deniedFromMemory(atLimit: AtLimit, nowMs: number): StoreDecision {
  const carried = carryDenialForward(atLimit.decision, atLimit.specs, Math.max(0, nowMs - atLimit.sentAtMs));
  return {
    ...carried,
    limits: carried.limits.map((outcome) => ({ ...outcome, remaining: 0 })),
    retryAfterMs: Math.max(1, atLimit.untilMs - nowMs),
  };
}
