/**
 * Prometheus metrics of one gateway, in a registry of its own (never prom-client's global one), so
 * several gateways in one process (tests, the bench) do not collide. Served on the admin listener.
 */

import type { EngineMetrics, RulesFailureReason } from '@sluice/engine';
import {
  type DecisionMeter,
  SETTLEMENT_KINDS,
  type SettlementKind,
  type StoreFailurePolicy,
  type StorePolicyMetrics,
} from '@sluice/shared';
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { CellHistogram } from './histogram-cells.js';

/** What `sluice_requests_total{decision}` says about one request. */
export type RequestDecision =
  /** the rule admitted it */
  | 'allowed'
  /** the rule denied it (429) */
  | 'denied'
  /** a shadow rule would have denied it; it was proxied */
  | 'shadow_denied'
  /** no rule applies: proxied without limit */
  | 'unlimited'
  /** STORE_FAILURE=closed and the store failed (503) */
  | 'unavailable';

/**
 * A request counter cell: the hot path adds to a plain number, and the cell is folded into
 * `sluice_requests_total` when Prometheus scrapes (prom-client hashes the label set on every
 * `inc`, which is wasted work per request).
 */
/**
 * Label values known before anything happens, so that every series exists from the first scrape at 0:
 * a panel or an alert on `rate(…)` reads 0, not "No data", until the first error.
 */
const STORE_ERROR_REASONS = ['timeout', 'error'] as const;
const STORE_CALL_OPS = ['acquire', 'settle'] as const;
const SETTLEMENT_RESULTS = ['ok', 'error'] as const;
/** rules-cache.ts's FailureReason */
const RULES_REFRESH_FAILURE_REASONS = ['unreachable', 'status', 'invalid'] as const;
const UPSTREAM_ERROR_KINDS = ['unreachable', 'timeout', 'error'] as const;
/** the refusals counted under their error code (others are counted by their PATH_/HOST_ reason) */
const BAD_REQUEST_CODES = [
  'SLUICE_RULES_NOT_LOADED',
  'SLUICE_METHOD_NOT_ALLOWED',
  'SLUICE_NO_UPSTREAM',
  'SLUICE_SHUTTING_DOWN',
  'SLUICE_BAD_FORWARDED_FOR',
  'SLUICE_BODY_TOO_LARGE',
] as const;
const REQUEST_DECISIONS: readonly RequestDecision[] = [
  'allowed',
  'denied',
  'shadow_denied',
  'unlimited',
  'unavailable',
];

/**
 * prom-client's default Node.js metrics that promtool refuses (`promtool check metrics` exits 3: a
 * gauge must not end in `_total`). Each is the sum over `type` of a gauge that stays
 * (`nodejs_active_handles` …), so nothing is lost: `sum(sluice_nodejs_active_handles)`.
 */
const DEFAULT_GAUGES_NAMED_TOTAL = [
  'sluice_nodejs_active_handles_total',
  'sluice_nodejs_active_requests_total',
  'sluice_nodejs_active_resources_total',
];

/** Creates every series of `counter` for `labelSets` at 0 (prom-client creates one on its first `inc`). */
function startAtZero<L extends string>(
  counter: Counter<L>,
  labelSets: readonly Partial<Record<L, string>>[],
): void {
  for (const labels of labelSets) counter.inc(labels, 0);
}

export class RequestCounterCell {
  pending = 0;
  constructor(readonly labels: { rule: string; decision: RequestDecision }) {}
  inc(): void {
    this.pending++;
  }
}

export class GatewayMetrics implements EngineMetrics {
  readonly registry = new Registry();

  /** when the rules API last confirmed the rule set in use (ms since the epoch); set by the rules cache */
  rulesConfirmedAtMs: number | undefined;
  /** how many denials the denial cache holds; set by the engine (`observe`) */
  denialCacheSize: () => number = () => 0;
  /** tokens this gateway holds in leases (lease mode); set by the engine (`observe`) */
  leaseTokensOutstanding: () => number = () => 0;
  /** WebSocket connections this gateway relays now; set by the gateway */
  webSocketsOpen: () => number = () => 0;

  readonly #requestCells = new Map<string, RequestCounterCell>();

  readonly requests = new Counter({
    name: 'sluice_requests_total',
    help: 'Requests by the rule that applied (empty when none) and the decision',
    labelNames: ['rule', 'decision'] as const,
    registers: [this.registry],
    collect: () => {
      for (const cell of this.#requestCells.values()) {
        // a cell of a rule nobody asked yet still shows its series, at 0
        this.requests.inc(cell.labels, cell.pending);
        cell.pending = 0;
      }
    },
  });

  readonly settlements = new Counter({
    name: 'sluice_settlements_total',
    help: 'Settlements sent to the store, by kind (refund, charge, release: slots only, renew: the slots of a running exchange kept) and result (ok, error)',
    labelNames: ['kind', 'result'] as const,
    registers: [this.registry],
  });

  /** The counter cell of one (rule, decision); the same cell for the same labels. */
  requestCell(rule: string, decision: RequestDecision): RequestCounterCell {
    const id = `${decision}\0${rule}`;
    let cell = this.#requestCells.get(id);
    if (cell === undefined) {
      cell = new RequestCounterCell({ rule, decision });
      this.#requestCells.set(id, cell);
    }
    return cell;
  }

  /** observed once per store decision: cells of plain numbers, read at scrape (histogram-cells.ts) */
  readonly decisionSeconds = new CellHistogram(
    'sluice_decision_duration_seconds',
    'Time to get one limiter decision from the store, by store (redis, memory, local fallback)',
    'store',
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
    this.registry,
  );

  readonly storeErrors = new Counter({
    name: 'sluice_store_errors_total',
    help: 'Store decisions that failed, by reason (timeout, error)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly storeFallbacks = new Counter({
    name: 'sluice_store_fallbacks_total',
    help: 'Decisions taken by the STORE_FAILURE policy instead of the store, by policy',
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });

  readonly fallbackGateways = new Gauge({
    name: 'sluice_fallback_gateways',
    help: 'Gateways seen alive in the last minute (heartbeats in Redis): STORE_FAILURE=local holds 1/N of each limit',
    registers: [this.registry],
  });

  readonly fallbackShare = new Gauge({
    name: 'sluice_fallback_share',
    help: "Share of each limit this gateway's STORE_FAILURE=local fallback holds while Redis is away (1/N)",
    registers: [this.registry],
  });

  readonly breakerState = new Gauge({
    name: 'sluice_store_breaker_state',
    help: 'Circuit breaker in front of the store: 0 closed (store used), 1 open (policy used), 2 half-open (probing)',
    registers: [this.registry],
  });

  readonly cachedDenials = new Counter({
    name: 'sluice_denials_cached_total',
    help: 'Denials answered from the local denial cache without asking the store',
    registers: [this.registry],
  });

  readonly denialCacheEntries = new Gauge({
    name: 'sluice_denial_cache_entries',
    help: 'Denials currently remembered locally',
    registers: [this.registry],
    collect: () => {
      this.denialCacheEntries.set(this.denialCacheSize());
    },
  });

  readonly leaseTokens = new Gauge({
    name: 'sluice_lease_tokens_outstanding',
    help: 'Tokens this gateway holds in leases (lease mode), summed over limits: the most it may under-admit',
    registers: [this.registry],
    collect: () => {
      this.leaseTokens.set(this.leaseTokensOutstanding());
    },
  });

  readonly webSockets = new Gauge({
    name: 'sluice_websockets_open',
    help: 'WebSocket connections this gateway relays now (each holds its concurrency slots while open)',
    registers: [this.registry],
    collect: () => {
      this.webSockets.set(this.webSocketsOpen());
    },
  });

  readonly storeCalls = new Counter({
    name: 'sluice_store_calls_total',
    help: 'Calls to the primary store (one script call each), by operation (acquire, settle)',
    labelNames: ['op'] as const,
    registers: [this.registry],
  });

  readonly rulesVersion = new Gauge({
    name: 'sluice_rules_version',
    help: 'Version of the rule-set snapshot in use (-1 before the first load)',
    registers: [this.registry],
  });

  readonly rulesCount = new Gauge({
    name: 'sluice_rules_enabled',
    help: 'Enabled rules in the rule set in use',
    registers: [this.registry],
  });

  readonly rulesAgeSeconds = new Gauge({
    name: 'sluice_rules_age_seconds',
    help: 'Seconds since the rules API last confirmed the rule set in use (a 200 or a 304); -1 before the first load',
    registers: [this.registry],
    collect: () => {
      const at = this.rulesConfirmedAtMs;
      this.rulesAgeSeconds.set(at === undefined ? -1 : Math.max(0, (Date.now() - at) / 1000));
    },
  });

  readonly rulesRefreshFailures = new Counter({
    name: 'sluice_rules_refresh_failures_total',
    help: 'Snapshot loads that failed (rules API unreachable, bad answer, invalid rule); the last good set is kept',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly rulesLoaded = new Gauge({
    name: 'sluice_rules_loaded',
    help: '1 once a rule set has been loaded (the gateway is ready), else 0',
    registers: [this.registry],
  });

  readonly upstreamErrors = new Counter({
    name: 'sluice_upstream_errors_total',
    help: 'Proxied requests that failed at the upstream, by upstream prefix and kind (unreachable, timeout, error)',
    labelNames: ['upstream', 'kind'] as const,
    registers: [this.registry],
  });

  readonly badRequests = new Counter({
    name: 'sluice_bad_requests_total',
    help: 'Requests refused without a rule decision, by code (unsafe paths, bodies too large, rules not loaded, no upstream)',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });

  readonly tokenVerifications = new Counter({
    name: 'sluice_jwt_verifications_total',
    help: 'Bearer tokens checked by signature (cached ones are not counted), by result: ok or why it failed (expired, bad_signature, unknown_key, jwks_unavailable, …)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  readonly jwksFetches = new Counter({
    name: 'sluice_jwks_fetches_total',
    help: 'Fetches of JWT_JWKS_URL by result (ok, error); while it fails, tokens it would verify count as unauthenticated',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  observe(gauges: { denialCacheSize: () => number; leaseTokensOutstanding: () => number }): void {
    this.denialCacheSize = gauges.denialCacheSize;
    this.leaseTokensOutstanding = gauges.leaseTokensOutstanding;
  }

  gatewaysCounted(gateways: number): void {
    this.fallbackGateways.set(gateways);
    this.fallbackShare.set(1 / gateways);
  }

  jwksFetched(outcome: 'ok' | 'error'): void {
    this.jwksFetches.labels(outcome).inc();
  }

  rulesRefreshFailed(reason: RulesFailureReason): void {
    this.rulesRefreshFailures.labels(reason).inc();
  }

  rulesConfirmed(atMs: number): void {
    this.rulesConfirmedAtMs = atMs;
  }

  ruleSetInForce(version: number, rules: number): void {
    this.rulesVersion.set(version);
    this.rulesCount.set(rules);
    this.rulesLoaded.set(1);
  }

  /** The decision core's counters, as request cells of `sluice_requests_total`. */
  decisionMeter(): DecisionMeter {
    return {
      requests: (rule) => ({
        allowed: this.requestCell(rule, 'allowed'),
        denied: this.requestCell(rule, 'denied'),
        shadowDenied: this.requestCell(rule, 'shadow_denied'),
        unavailable: this.requestCell(rule, 'unavailable'),
        unlimited: this.requestCell(rule, 'unlimited'),
      }),
      cachedDenials: this.cachedDenials,
    };
  }

  /** What the store policy reports, bound to its metrics once (each label set hashed once, not per call). */
  storePolicyMetrics(primary: 'redis' | 'memory', policy: StoreFailurePolicy): StorePolicyMetrics {
    const latency = {
      primary: this.decisionSeconds.cell(primary),
      local: this.decisionSeconds.cell('local'),
    };
    const errors = { timeout: this.storeErrors.labels('timeout'), error: this.storeErrors.labels('error') };
    const calls = { acquire: this.storeCalls.labels('acquire'), settle: this.storeCalls.labels('settle') };
    const fallbacks = this.storeFallbacks.labels(policy);
    startAtZero(this.storeFallbacks, [{ policy }]);
    return {
      decisionSeconds: (store, seconds) => latency[store].observe(seconds),
      fallback: () => fallbacks.inc(),
      storeError: (kind) => errors[kind].inc(),
      storeCall: (kind) => calls[kind].inc(),
      breakerState: (value) => this.breakerState.set(value),
    };
  }

  /**
   * Counts a settlement event in `sluice_settlements_total`, each label set bound once (prom-client
   * hashes the labels on every `labels()`; a concurrency rule settles once per request).
   */
  settlementCounter(): (event: { kind: SettlementKind; ok: boolean }) => void {
    const cells = Object.fromEntries(
      SETTLEMENT_KINDS.map((kind) => [
        kind,
        { ok: this.settlements.labels(kind, 'ok'), error: this.settlements.labels(kind, 'error') },
      ]),
    ) as Record<SettlementKind, { ok: { inc(): void }; error: { inc(): void } }>;
    return ({ kind, ok }) => (ok ? cells[kind].ok : cells[kind].error).inc();
  }

  /** The error counters of one upstream (by its name), each series there from the start at 0. */
  upstreamErrorCounters(upstream: string) {
    startAtZero(
      this.upstreamErrors,
      UPSTREAM_ERROR_KINDS.map((kind) => ({ upstream, kind })),
    );
    return {
      unreachable: this.upstreamErrors.labels(upstream, 'unreachable'),
      timeout: this.upstreamErrors.labels(upstream, 'timeout'),
      error: this.upstreamErrors.labels(upstream, 'error'),
    };
  }

  constructor(options: { defaultMetrics?: boolean } = {}) {
    startAtZero(
      this.storeErrors,
      STORE_ERROR_REASONS.map((reason) => ({ reason })),
    );
    startAtZero(
      this.storeCalls,
      STORE_CALL_OPS.map((op) => ({ op })),
    );
    startAtZero(
      this.settlements,
      SETTLEMENT_KINDS.flatMap((kind) => SETTLEMENT_RESULTS.map((result) => ({ kind, result }))),
    );
    startAtZero(
      this.rulesRefreshFailures,
      RULES_REFRESH_FAILURE_REASONS.map((reason) => ({ reason })),
    );
    startAtZero(
      this.badRequests,
      BAD_REQUEST_CODES.map((code) => ({ code })),
    );
    // requests no rule applies to are counted under rule "" whatever the rule set
    for (const decision of REQUEST_DECISIONS) this.requestCell('', decision);
    this.rulesVersion.set(-1);
    this.rulesLoaded.set(0);
    this.breakerState.set(0);
    this.fallbackGateways.set(1);
    this.fallbackShare.set(1);
    if (options.defaultMetrics !== false) {
      collectDefaultMetrics({ register: this.registry, prefix: 'sluice_' });
      for (const name of DEFAULT_GAUGES_NAMED_TOTAL) this.registry.removeSingleMetric(name);
    }
  }
}
