// An open-loop, evenly paced HTTP client: requests are sent on a fixed schedule whatever the server
// does, and latency is measured from the scheduled send time, so a slow server cannot hide its queue
// (no coordinated omission). Written by hand because autocannon and wrk are closed-loop.
//
// The client must not be what is measured. It sends through an undici Pool whose sockets are opened
// before the clock starts (no connect in the measured window), with undici's raw dispatch (no body
// stream per response), and it reports how late it sent (`sendLagP99Ms`) and the rate it achieved:
// a run that lagged by more than a few ms, or whose rate missed the target, measured the client and
// says so in `clientBound`.
import { build } from 'hdr-histogram-js';
import { Pool } from 'undici';

export interface OpenLoopOptions {
  /** sockets opened up front; more than the server can ever have busy at once (default 32) */
  connections?: number;
  /** sent at the target rate before measuring, not recorded, ms (default 500) */
  warmupMs?: number;
  /**
   * Called as the measured window opens (after the warm-up, before the first recorded send) and as it
   * closes (every recorded response in): a caller reads what the servers did for exactly the
   * recorded requests (CPU time, Redis counters) between the two.
   */
  window?: { opens(): Promise<void>; closes(): Promise<void> };
}

export interface OpenLoopResult {
  targetRps: number;
  /** responses received per second of the measured window */
  achievedRps: number;
  sent: number;
  ok: number;
  errors: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  /** how late the client sent, 99th percentile, ms: its own share of the latency */
  sendLagP99Ms: number;
  /** true when the client, not the server, limited the run (late sends or a missed rate) */
  clientBound: boolean;
}

/**
 * Send lag (p99) past which the client, not the server, is what a run measured, ms. A client that
 * cannot keep up lags by tens or hundreds of ms; on a shared 2-vCPU VM an idle core still stalls
 * for 1–3 ms a few times a second, which shows here as a lag p99 of about a millisecond.
 */
const CLIENT_LAG_LIMIT_MS = 5;

const newHistogram = () =>
  build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });

export async function openLoop(
  url: string,
  ratePerSec: number,
  durationMs: number,
  options: OpenLoopOptions = {},
): Promise<OpenLoopResult> {
  const target = new URL(url);
  const connections = options.connections ?? 32;
  const warmupMs = options.warmupMs ?? 500;
  const pool = new Pool(target.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const path = target.pathname + target.search;
  const latencyUs = newHistogram();
  const lagUs = newHistogram();
  let ok = 0;
  let errors = 0;
  let inflight = 0;
  let recording = false;

  // One request; `scheduledAt` is when the schedule said to send it (performance.now ms).
  const send = (scheduledAt: number, onDone?: () => void) => {
    inflight++;
    const record = recording;
    let status = 0;
    pool.dispatch(
      { origin: target.origin, path, method: 'GET' },
      {
        onConnect() {},
        onHeaders(statusCode: number) {
          status = statusCode;
          return true;
        },
        onData() {
          return true;
        },
        onComplete() {
          inflight--;
          if (record) {
            latencyUs.recordValue(Math.max(1, Math.round((performance.now() - scheduledAt) * 1000)));
            if (status < 500) ok++;
            else errors++;
          }
          onDone?.();
        },
        onError() {
          inflight--;
          if (record) errors++;
          onDone?.();
        },
      },
    );
  };

  // Open every socket before the clock starts: `connections` requests at once, twice.
  for (let round = 0; round < 2; round++) {
    await new Promise<void>((resolve) => {
      let left = connections;
      for (let i = 0; i < connections; i++) send(performance.now(), () => --left === 0 && resolve());
    });
  }

  // Evenly paced: a setImmediate loop (not a ms timer) so sends are spaced by the interval, not
  // bunched per millisecond. The load generator has its own CPU, so spinning costs the servers nothing.
  const intervalMs = 1000 / ratePerSec;
  const pace = (periodMs: number) =>
    new Promise<{ sent: number; elapsedMs: number }>((resolve) => {
      const start = performance.now();
      const total = Math.floor(periodMs / intervalMs);
      let sent = 0;
      const tick = () => {
        const now = performance.now();
        const due = Math.min(total, Math.floor((now - start) / intervalMs) + 1);
        while (sent < due) {
          const scheduledAt = start + sent * intervalMs;
          if (recording) lagUs.recordValue(Math.max(1, Math.round((performance.now() - scheduledAt) * 1000)));
          send(scheduledAt);
          sent++;
        }
        if (sent < total) setImmediate(tick);
        else resolve({ sent, elapsedMs: performance.now() - start });
      };
      tick();
    });

  if (warmupMs > 0) await pace(warmupMs);
  // every response in (or 10 s gone: a server that hangs does not hang the bench)
  const drained = async () => {
    const deadline = performance.now() + 10_000;
    while (inflight > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 1));
  };
  // the warm-up's last responses come in before the window opens, so none of them counts in it
  await drained();
  await options.window?.opens();
  recording = true;
  const measuredStart = performance.now();
  const { sent } = await pace(durationMs);
  await drained();
  const measuredMs = performance.now() - measuredStart;
  await options.window?.closes();
  await pool.close().catch(() => pool.destroy());

  const achievedRps = (ok + errors) / (measuredMs / 1000);
  const sendLagP99Ms = lagUs.getValueAtPercentile(99) / 1000;
  const p50Ms = latencyUs.getValueAtPercentile(50) / 1000;
  return {
    targetRps: ratePerSec,
    achievedRps,
    sent,
    ok,
    errors,
    p50Ms,
    p90Ms: latencyUs.getValueAtPercentile(90) / 1000,
    p99Ms: latencyUs.getValueAtPercentile(99) / 1000,
    maxMs: latencyUs.maxValue / 1000,
    sendLagP99Ms,
    clientBound: achievedRps < ratePerSec * 0.98 || sendLagP99Ms > CLIENT_LAG_LIMIT_MS,
  };
}
