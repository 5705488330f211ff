/**
 * give-back.lua (the Redis Cluster cross-slot give-back) in the real Redis, on a simulated clock,
 * against its meaning: a charge given back leaves the limit where it would be had the charge never
 * been made (token bucket: the same balance; sliding window: the same estimate when the charge's
 * window is certain, else at most the charge above it, never below). Two keys live the same history;
 * one of them also takes a charge and gets it back; then both are read without charging.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { algorithmOf } from './algorithms/index.js';
import { GIVE_BACK_LUA } from './give-back-script.js';
import type { LimitCheck, LimitSpec } from './limits.js';
import { limitKey } from './limits.js';
import { GIVE_BACK_COMMAND } from './redis-store.js';
import { specArb, specCostArb, specStepMsArb, startMsArb } from './test-arbitraries.js';
import { openTestRedis, type TestRedis } from './test-redis.js';
import { SIMULATION_TTL_MS } from './test-reference.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await openTestRedis('give-back');
  redis.admin.defineCommand(GIVE_BACK_COMMAND, { lua: GIVE_BACK_LUA });
});
afterAll(() => redis.close());

/** What a read sees: a check no limit can admit is denied, and a denial charges nothing. */
async function levelAt(key: string, spec: LimitSpec, nowMs: number): Promise<number> {
  const decision = await redis.store.acquireAt([{ key, spec, cost: 1e15 }], nowMs, SIMULATION_TTL_MS);
  expect(decision.allowed).toBe(false);
  return decision.limits[0]!.level;
}

async function giveBack(check: LimitCheck, nowMs: number, sinceMs: number): Promise<[string, number]> {
  const args = [
    check.spec.algorithm,
    String(check.cost),
    ...algorithmOf(check.spec).luaArguments(check.spec),
    String(sinceMs),
  ];
  const reply = (await redis.admin.sluiceGiveBack(
    1,
    redis.prefix + check.key,
    String(nowMs),
    String(SIMULATION_TTL_MS),
    '1',
    ...args,
  )) as [string, number];
  return reply;
}

const near = (a: number, b: number, scale: number) => Math.abs(a - b) <= 1e-9 * Math.max(1, scale);

describe('give-back.lua', () => {
  it('a token bucket given back is where it would be without the charge', async () => {
    const spec: LimitSpec = {
      algorithm: 'token-bucket',
      capacity: 10,
      refill: 1,
      periodMs: 1_000,
      maxDebt: 0,
    };
    const key = limitKey('', 'rule', 'burst', 'ip:1');
    for (let i = 0; i < 4; i++) await redis.store.acquireAt([{ key, spec, cost: 1 }], 0, SIMULATION_TTL_MS);
    expect(await giveBack({ key, spec, cost: 3 }, 500, 500)).toEqual(['9.5', 500]);
    expect(await levelAt(key, spec, 500)).toBe(9.5);
    // capped at capacity
    expect(await giveBack({ key, spec, cost: 3 }, 500, 0)).toEqual(['10', 0]);
    expect(await redis.admin.exists(redis.prefix + key)).toBe(0);
  });

  it('a sliding window gives back to the window the charge counted in, or, when unsure, the previous one', async () => {
    const spec: LimitSpec = { algorithm: 'sliding-window', max: 10, windowMs: 1_000 };
    const key = limitKey('', 'rule', 'window', 'ip:2');
    for (let i = 0; i < 4; i++)
      await redis.store.acquireAt([{ key, spec, cost: 1 }], 1_990, SIMULATION_TTL_MS);
    // certain: the charge was made in this window
    expect((await giveBack({ key, spec, cost: 1 }, 1_995, 5))[0]).toBe('3');
    // unsure (1_995 - 1_000 is in the window before): nothing counted there, nothing given back
    expect((await giveBack({ key, spec, cost: 1 }, 1_995, 1_000))[0]).toBe('3');
    // a new window has traffic of its own; unsure where a charge made up to 30 ms ago counted: the
    // previous window (3 -> 2) gives it back, not the new one: 2 + 2 * 0.99
    await redis.store.acquireAt([{ key, spec, cost: 2 }], 2_005, SIMULATION_TTL_MS);
    expect(Number((await giveBack({ key, spec, cost: 1 }, 2_010, 30))[0])).toBeCloseTo(2 + 2 * 0.99, 12);
  });

  it('never leaves a limit lower than without the charge, and exactly there when the window is certain', async () => {
    const scenario = specArb.chain((spec) =>
      fc.record({
        spec: fc.constant(spec),
        startMs: startMsArb,
        history: fc.array(fc.record({ stepMs: specStepMsArb(spec), cost: specCostArb(spec) }), {
          maxLength: 8,
        }),
        stepMs: specStepMsArb(spec),
        cost: specCostArb(spec),
        afterMs: fc.oneof(
          fc.constant(0),
          fc.double({ min: 0, max: 50, noNaN: true }),
          // across a window boundary, where the give-back must pick the window the charge is in
          fc
            .double({ min: 0, max: 1.5, noNaN: true })
            .map((f) => f * (spec.algorithm === 'sliding-window' ? spec.windowMs : 1_000)),
        ),
        marginMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 100 })),
      }),
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenario, async ({ spec, startMs, history, stepMs, cost, afterMs, marginMs }) => {
        run++;
        const charged = limitKey('', `rule-${run}`, 'limit', 'charged');
        const untouched = limitKey('', `rule-${run}`, 'limit', 'untouched');
        let nowMs = startMs;
        for (const step of history) {
          nowMs += step.stepMs;
          for (const key of [charged, untouched]) {
            await redis.store.acquireAt([{ key, spec, cost: step.cost }], nowMs, SIMULATION_TTL_MS);
          }
        }
        const chargedAtMs = nowMs + stepMs;
        const decision = await redis.store.acquireAt(
          [{ key: charged, spec, cost }],
          chargedAtMs,
          SIMULATION_TTL_MS,
        );
        if (!decision.allowed) return;
        const givenBackAtMs = chargedAtMs + afterMs;
        const sinceMs = afterMs + marginMs;
        const [levelText] = await giveBack({ key: charged, spec, cost }, givenBackAtMs, sinceMs);
        const a = await levelAt(charged, spec, givenBackAtMs);
        const b = await levelAt(untouched, spec, givenBackAtMs);
        expect(Number(levelText)).toBe(a);
        const scale =
          spec.algorithm === 'token-bucket' ? spec.capacity + spec.maxDebt + cost : spec.max + cost;
        const summary = JSON.stringify({ spec, a, b, cost, chargedAtMs, givenBackAtMs, sinceMs });
        if (spec.algorithm === 'token-bucket') {
          expect(near(a, b, scale), summary).toBe(true);
          return;
        }
        const windowOf = (ms: number) => Math.floor(ms / spec.windowMs);
        // the estimate: never below the untouched one (a give-back never admits more), never above by more than the charge
        expect(a >= b - 1e-9 * scale, summary).toBe(true);
        expect(a <= b + cost + 1e-9 * scale, summary).toBe(true);
        if (
          windowOf(givenBackAtMs - sinceMs) === windowOf(givenBackAtMs) &&
          windowOf(chargedAtMs) === windowOf(givenBackAtMs)
        ) {
          expect(near(a, b, scale), summary).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  }, 60_000);
});
