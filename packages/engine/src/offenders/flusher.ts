/**
 * Sends a gateway's offender counts to Redis at a bounded rate: every `intervalMs` (default 5 s), what
 * was recorded since the last flush goes out as ZINCRBYs in one pipeline (one per rule on a Cluster),
 * never a call per denial. A flush that fails is dropped (analytics are best effort; the gateway's own
 * `GET /offenders` still has them) and logged.
 */
import type { SharedChannels } from '@sluice/shared';
import type { EngineLogger } from '../telemetry.js';
import type { OffenderLog } from './offender-log.js';

export const DEFAULT_OFFENDERS_FLUSH_MS = 5_000;

export interface OffenderFlusherOptions {
  log: OffenderLog;
  /** the store's shared channels (on Redis: the sorted sets the rules API reads) */
  shared: SharedChannels;
  intervalMs?: number;
  logger: EngineLogger;
  onFailure?: () => void;
}

export class OffenderFlusher {
  readonly #options: OffenderFlusherOptions;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> = Promise.resolve();

  constructor(options: OffenderFlusherOptions) {
    this.#options = options;
  }

  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(
      () => void this.flush(),
      this.#options.intervalMs ?? DEFAULT_OFFENDERS_FLUSH_MS,
    );
    this.#timer.unref();
  }

  /** Sends what is unflushed now (after any flush still under way); resolves once it is sent or dropped. */
  flush(): Promise<void> {
    this.#inFlight = this.#inFlight.then(async () => {
      const counts = this.#options.log.takeUnflushed();
      if (counts.size === 0) return;
      try {
        await this.#options.shared.addOffenderCounts(counts);
      } catch (error) {
        this.#options.onFailure?.();
        this.#options.logger.warn(
          { err: error },
          'could not send top-offender counts to Redis; dropped them',
        );
      }
    });
    return this.#inFlight;
  }

  /** Stops the timer and sends what is left. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.flush();
  }
}
