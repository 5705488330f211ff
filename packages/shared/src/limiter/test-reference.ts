/**
 * Test helpers: the TypeScript reference the Lua script is compared with, and a runner for the
 * differential tests (each algorithm's, and the stacked one).
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { acquireFrom, type StateTable } from './engine.js';
import { type LimitCheck, limitKey, type StoreDecision } from './limits.js';
import type { StackedScenario } from './test-arbitraries.js';
import type { TestRedis } from './test-redis.js';

/** Keeps simulated-clock keys alive in real time while a test walks its own clock. */
export const SIMULATION_TTL_MS = 600_000;

/** State kept the way the script keeps it with a long minTtl: written or deleted, never expired by time. */
export class ReferenceTable implements StateTable {
  readonly states = new Map<string, unknown>();
  get(key: string): unknown {
    return this.states.get(key);
  }
  set(key: string, state: unknown, ttlMs: number): void {
    if (ttlMs === 0) this.states.delete(key);
    else this.states.set(key, state);
  }
}

/** Bit for bit: the same verdicts, the same doubles (`Object.is`), the same whole ms. */
export function sameDecision(a: StoreDecision, b: StoreDecision): boolean {
  if (a.allowed !== b.allowed || a.deniedIndex !== b.deniedIndex || a.retryAfterMs !== b.retryAfterMs)
    return false;
  if (a.limits.length !== b.limits.length) return false;
  return a.limits.every((x, i) => {
    const y = b.limits[i]!;
    return (
      x.allowed === y.allowed &&
      Object.is(x.level, y.level) &&
      x.remaining === y.remaining &&
      x.retryAfterMs === y.retryAfterMs &&
      x.resetMs === y.resetMs
    );
  });
}

/** The checks of one operation; keys are unique to the run. */
export function checksOf(scenario: StackedScenario, run: string, opIndex: number): LimitCheck[] {
  const op = scenario.ops[opIndex]!;
  return op.limits.map((limit, j) => ({
    key: limitKey('', run, `l${limit}`, 'client'),
    spec: scenario.specs[limit]!,
    cost: op.costs[j]!,
  }));
}

/**
 * Runs random scenarios through the TypeScript engine (reference) and the store's Lua on the same
 * simulated clock, and asserts the answers are bit-identical. Returns what it ran.
 */
export async function runDifferential(
  redis: TestRedis,
  scenarios: fc.Arbitrary<StackedScenario>,
  numRuns: number,
): Promise<{ operations: number; denials: number; checks: number }> {
  const { store, clock } = redis.simulated({ minTtlMs: SIMULATION_TTL_MS });
  let run = 0;
  let operations = 0;
  let denials = 0;
  let checks = 0;
  await fc.assert(
    fc.asyncProperty(scenarios, async (scenario) => {
      const runId = `diff-${++run}-${Math.random().toString(36).slice(2)}`;
      const reference = new ReferenceTable();
      const expected: StoreDecision[] = [];
      const sent: Promise<StoreDecision>[] = [];
      let nowMs = scenario.startMs;
      for (let i = 0; i < scenario.ops.length; i++) {
        nowMs += scenario.ops[i]!.stepMs;
        const opChecks = checksOf(scenario, runId, i);
        expected.push(acquireFrom(reference, opChecks, nowMs));
        // sent without waiting: one connection keeps them in order, so this is a pipeline
        sent.push(clock.at(nowMs, () => store.acquire(opChecks)));
        checks += opChecks.length;
      }
      const actual = await Promise.all(sent);
      operations += scenario.ops.length;
      denials += expected.filter((d) => !d.allowed).length;
      const first = actual.findIndex((d, i) => !sameDecision(d, expected[i]!));
      if (first >= 0) {
        const op = scenario.ops[first]!;
        const specs = op.limits.map((l) => scenario.specs[l]);
        expect({ op, specs, lua: actual[first] }).toEqual({ op, specs, lua: expected[first] });
      }
    }),
    { numRuns },
  );
  return { operations, denials, checks };
}
