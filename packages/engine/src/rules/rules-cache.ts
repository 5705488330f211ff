/**
 * An engine's copy of the rules (docs/gateway.md): `GET /rules/snapshot` at start, again on
 * the `RULES_REFRESH` schedule with `If-None-Match`, compiled once per change, last good set kept.
 *
 * - A snapshot is taken whole or not at all: one invalid rule (shape or `compileRules`) rejects the
 *   snapshot, the last good set stays in force, and the failure is counted and logged. Dropping only
 *   the bad rule would silently lift a limit an admin meant to set.
 * - Ready once the first snapshot is loaded (an empty rule set counts). Until then `start()` keeps
 *   retrying with a short backoff, besides the schedule.
 * - Loads never overlap: the cron job runs with `noOverlap`, and a load asked for while one is
 *   running joins it.
 */
import { type CompiledRuleSet, compileRules, isRule, type Rule } from '@sluice/shared';
import cron, { type ScheduledTask } from 'node-cron';
import type { EngineLogger, EngineMetrics, RulesFailureReason } from '../telemetry.js';
import type { RuleSetSnapshot, RulesSource } from './rules-source.js';

export interface RulesCacheOptions {
  /** base URL of the rules API, without a trailing slash */
  rulesApiUrl: string;
  token: string | undefined;
  /** node-cron expression */
  refresh: string;
  fetchTimeoutMs: number;
  metrics: EngineMetrics;
  log: EngineLogger;
}

export type RefreshOutcome = 'changed' | 'unchanged' | 'failed';

type FailureReason = RulesFailureReason;

class SnapshotError extends Error {
  constructor(
    readonly reason: FailureReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Longest wait between two load attempts before the first snapshot, in ms. */
const MAX_START_BACKOFF_MS = 5_000;

/** The rules API as a gateway's rules source. */
export class RulesCache implements RulesSource {
  readonly #options: RulesCacheOptions;
  readonly #snapshotUrl: string;
  #current: RuleSetSnapshot | undefined;
  #etag: string | undefined;
  #inflight: Promise<RefreshOutcome> | undefined;
  #task: ScheduledTask | undefined;
  #stopped = false;
  #failing = false;
  #startTimer: NodeJS.Timeout | undefined;
  #loaded: Promise<void>;
  #resolveLoaded!: () => void;
  #onChange: (snapshot: RuleSetSnapshot) => void = () => {};

  constructor(options: RulesCacheOptions) {
    this.#options = options;
    this.#snapshotUrl = `${options.rulesApiUrl}/rules/snapshot`;
    this.#loaded = new Promise((resolve) => {
      this.#resolveLoaded = resolve;
    });
  }

  /** The rule set in force, or undefined before the first load. */
  get current(): RuleSetSnapshot | undefined {
    return this.#current;
  }

  get ready(): boolean {
    return this.#current !== undefined;
  }

  /** Resolves once the first snapshot is loaded. */
  whenLoaded(): Promise<void> {
    return this.#loaded;
  }

  /** Loads the first snapshot (retrying until it succeeds) and schedules the refresh job. */
  start(onChange: (snapshot: RuleSetSnapshot) => void): void {
    if (this.#task !== undefined || this.#stopped) return;
    this.#onChange = onChange;
    const log = this.#options.log;
    this.#task = cron.schedule(this.#options.refresh, () => this.refresh(), {
      name: 'sluice-rules-refresh',
      noOverlap: true,
      logger: {
        info: (message) => log.debug({ job: 'rules-refresh' }, message),
        warn: (message) => log.debug({ job: 'rules-refresh' }, message),
        error: (message, err) => log.warn({ job: 'rules-refresh', err }, String(message)),
        debug: (message) => log.trace({ job: 'rules-refresh' }, String(message)),
      },
    });
    let backoffMs = 200;
    const attempt = () => {
      this.#startTimer = undefined;
      if (this.#stopped || this.ready) return;
      void this.refresh().then(() => {
        if (this.#stopped || this.ready) return;
        this.#startTimer = setTimeout(attempt, backoffMs);
        backoffMs = Math.min(backoffMs * 2, MAX_START_BACKOFF_MS);
      });
    };
    attempt();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#startTimer) clearTimeout(this.#startTimer);
    this.#startTimer = undefined;
    const task = this.#task;
    this.#task = undefined;
    if (task) await task.destroy();
    await this.#inflight;
  }

  /** Asks the rules API once (joining a load already running). Never throws. */
  refresh(): Promise<RefreshOutcome> {
    this.#inflight ??= this.#load().finally(() => {
      this.#inflight = undefined;
    });
    return this.#inflight;
  }

  async #load(): Promise<RefreshOutcome> {
    const { metrics, log } = this.#options;
    try {
      const outcome = await this.#fetchAndApply();
      if (this.#failing) {
        this.#failing = false;
        log.info({ version: this.#current?.version }, 'rules API answers again');
      }
      return outcome;
    } catch (error) {
      const reason = error instanceof SnapshotError ? error.reason : 'invalid';
      metrics.rulesRefreshFailed(reason);
      const fields = { err: error, reason, version: this.#current?.version ?? null };
      const message = this.#current
        ? 'rules refresh failed: keeping the last good rule set'
        : 'rules load failed: not ready until a rule set is loaded';
      // One warning per streak of failures, then quieter, so a dead rules API does not flood the log.
      if (this.#failing) log.debug(fields, message);
      else log.warn(fields, message);
      this.#failing = true;
      return 'failed';
    }
  }

  async #fetchAndApply(): Promise<RefreshOutcome> {
    const { token, fetchTimeoutMs, metrics } = this.#options;
    const headers: Record<string, string> = { accept: 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    if (this.#etag && this.#current) headers['if-none-match'] = this.#etag;
    let response: Response;
    try {
      response = await fetch(this.#snapshotUrl, { headers, signal: AbortSignal.timeout(fetchTimeoutMs) });
    } catch (error) {
      throw new SnapshotError('unreachable', `GET ${this.#snapshotUrl} failed: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    if (response.status === 304 && this.#current) {
      await response.body?.cancel();
      metrics.rulesConfirmed(Date.now());
      return 'unchanged';
    }
    if (response.status !== 200) {
      const text = await response.text().catch(() => '');
      throw new SnapshotError(
        'status',
        `GET ${this.#snapshotUrl} answered ${response.status}: ${text.slice(0, 200)}`,
      );
    }
    let body: unknown;
    try {
      body = await response.json();
    } catch (error) {
      throw new SnapshotError('invalid', `snapshot is not JSON: ${errorMessage(error)}`, { cause: error });
    }
    const { version, rules } = readSnapshot(body);
    const etag = response.headers.get('etag') ?? `"${version}"`;
    if (this.#current && this.#current.version === version) {
      this.#etag = etag;
      metrics.rulesConfirmed(Date.now());
      return 'unchanged';
    }
    let compiled: CompiledRuleSet;
    try {
      compiled = compileRules(rules);
    } catch (error) {
      throw new SnapshotError('invalid', `snapshot version ${version}: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    const snapshot: RuleSetSnapshot = { version, compiled };
    this.#onChange(snapshot);
    const previous = this.#current?.version;
    this.#current = snapshot;
    this.#etag = etag;
    metrics.rulesConfirmed(Date.now());
    this.#options.log.info(
      { version, previous: previous ?? null, rules: rules.length, enabled: compiled.size },
      previous === undefined ? 'rule set loaded' : 'rule set changed',
    );
    if (previous === undefined) this.#resolveLoaded();
    return 'changed';
  }
}

/** Checks the snapshot's shape; every rule must be a complete, valid rule. */
function readSnapshot(body: unknown): { version: number; rules: Rule[] } {
  if (typeof body !== 'object' || body === null)
    throw new SnapshotError('invalid', 'snapshot is not an object');
  const { version, rules } = body as { version?: unknown; rules?: unknown };
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 0) {
    throw new SnapshotError('invalid', 'snapshot.version is not a whole number');
  }
  if (!Array.isArray(rules)) throw new SnapshotError('invalid', 'snapshot.rules is not an array');
  rules.forEach((rule: unknown, i) => {
    if (!isRule(rule)) {
      const name = (rule as { name?: unknown } | null)?.name;
      throw new SnapshotError(
        'invalid',
        `snapshot version ${version}: rules[${i}]${typeof name === 'string' ? ` ("${name}")` : ''} is not a valid rule`,
      );
    }
  });
  return { version, rules: rules as Rule[] };
}

function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
