// One closed-loop round (autocannon, pipelining 1) against one URL, with what it cost: EVALSHA calls,
// Redis data commands and socket reads from Redis `INFO` around the round, CPU time of each server process, and the
// gateway's STORE_FAILURE fallbacks when asked for.
import autocannon from 'autocannon';
import { cpuMs } from './cpu-time.js';
import type { RedisCounters } from './stack.js';

/** BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CONNECTIONS (16): every closed-loop bench's settings. */
export function closedLoopSettings(): { rounds: number; seconds: number; connections: number } {
  return {
    rounds: Number(process.env.BENCH_ROUNDS ?? 3),
    seconds: Number(process.env.BENCH_SECONDS ?? 5),
    connections: Number(process.env.BENCH_CONNECTIONS ?? 16),
  };
}

export interface RoundResult {
  rps: number;
  responses: number;
  status2xx: number;
  status429: number;
  errors: number;
  /** EVALSHA calls per response */
  evalshaPerResponse: number;
  /** Redis data commands per response (inside scripts included) */
  commandsPerResponse: number;
  /** gateway decisions taken by the STORE_FAILURE fallback, not Redis (0 when not asked for) */
  fallbacks: number;
  /** Redis socket reads per EVALSHA (below 1: several calls arrived in one read) */
  redisReadsPerEvalsha: number;
  /** CPU µs per response, by server process */
  cpuUs: { proxy: number; upstream: number; redis: number };
}

export interface RoundOptions {
  url: string;
  seconds: number;
  connections: number;
  headers?: Record<string, string>;
  /** the processes on the server CPU, whose CPU time is charged to this round */
  pids: { proxy: number | undefined; upstream: number | undefined; redis: number | undefined };
  redisCounters: () => Promise<RedisCounters>;
  /** the gateway's fallback count so far; only for rounds through a gateway */
  fallbacks?: () => Promise<number>;
}

export async function closedLoopRound(o: RoundOptions): Promise<RoundResult> {
  const { pids } = o;
  const cpuBefore = { proxy: cpuMs(pids.proxy), upstream: cpuMs(pids.upstream), redis: cpuMs(pids.redis) };
  const fallbacksBefore = o.fallbacks ? await o.fallbacks() : 0;
  const redisBefore = await o.redisCounters();
  const r = await autocannon({
    url: o.url,
    headers: o.headers ?? {},
    connections: o.connections,
    pipelining: 1,
    duration: o.seconds,
  });
  const redisAfter = await o.redisCounters();
  const fallbacks = o.fallbacks ? (await o.fallbacks()) - fallbacksBefore : 0;
  const responses = r.requests.total;
  const perResponseUs = (pid: number | undefined, beforeMs: number) =>
    ((cpuMs(pid) - beforeMs) * 1000) / responses;
  const statuses = r.statusCodeStats as unknown as Record<string, { count: number } | undefined>;
  const evalsha = redisAfter.evalsha - redisBefore.evalsha;
  return {
    rps: r.requests.average,
    responses,
    status2xx: r['2xx'],
    status429: statuses['429']?.count ?? 0,
    errors: r.errors + r.timeouts,
    evalshaPerResponse: evalsha / responses,
    commandsPerResponse: (redisAfter.commands - redisBefore.commands) / responses,
    fallbacks,
    redisReadsPerEvalsha: evalsha > 0 ? (redisAfter.reads - redisBefore.reads) / evalsha : 0,
    cpuUs: {
      proxy: perResponseUs(pids.proxy, cpuBefore.proxy),
      upstream: perResponseUs(pids.upstream, cpuBefore.upstream),
      redis: perResponseUs(pids.redis, cpuBefore.redis),
    },
  };
}
