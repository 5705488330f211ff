/**
 * How many gateways share the limits, for STORE_FAILURE=local's fair share (SPEC §1): every gateway
 * beats once a second, off the request path, into the store's shared channels (on Redis one sorted set: member: this gateway's id,
 * score: the beat's time), drops beats older than a minute and counts the rest in the same pipeline.
 * The count it last read is N; while Redis is away it keeps the last N it saw, which is exactly when
 * the fallback needs it. A gateway that stops leaves the set at once; one that dies leaves it a minute
 * later. Without Redis (the in-process store) a gateway is alone: N = 1.
 */
import { randomUUID } from 'node:crypto';
import type { SharedChannels } from '@sluice/shared';
import type { EngineLogger } from './telemetry.js';

/** How often a gateway beats, ms. */
export const HEARTBEAT_INTERVAL_MS = 1_000;
/** A gateway counts as alive while its last beat is this recent, ms (SPEC: the last minute). */
export const ALIVE_WITHIN_MS = 60_000;

export interface HeartbeatOptions {
  /** the store's shared channels: the beats live beside the limits */
  shared: SharedChannels;
  logger: EngineLogger;
  /** called with N after every beat that reached the store */
  onCount?: (gateways: number) => void;
  intervalMs?: number;
}

export class GatewayHeartbeat {
  readonly id = randomUUID();
  readonly #options: HeartbeatOptions;
  #gateways = 1;
  #timer: NodeJS.Timeout | undefined;
  #failing = false;

  constructor(options: HeartbeatOptions) {
    this.#options = options;
  }

  /** The gateways seen alive in the last minute, this one included (at least 1). */
  get gateways(): number {
    return this.#gateways;
  }

  start(): void {
    if (this.#timer !== undefined) return;
    void this.beat();
    this.#timer = setInterval(() => void this.beat(), this.#options.intervalMs ?? HEARTBEAT_INTERVAL_MS);
    this.#timer.unref();
  }

  /** One beat: this gateway's time in, the old beats out, the rest counted. Never throws. */
  async beat(): Promise<void> {
    try {
      const count = await this.#options.shared.beat(this.id, Date.now(), ALIVE_WITHIN_MS);
      this.#gateways = Math.max(1, count);
      this.#options.onCount?.(this.#gateways);
      this.#failing = false;
    } catch (error) {
      // the store away: keep the last count (the fallback's share is taken from it); say so once
      if (!this.#failing) {
        this.#failing = true;
        this.#options.logger.debug({ err: error, gateways: this.#gateways }, 'heartbeat not written');
      }
    }
  }

  /** Stops beating and leaves the set, so the others' share grows at once. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#options.shared.leave(this.id).catch(() => {});
  }
}
