import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SlidingWindowSpec } from '../../limits.js';
import { specCostArb, specStepMsArb, startMsArb, windowSpecArb } from '../../test-arbitraries.js';
import { LimitArgumentError, type Verdict } from '../algorithm.js';
import { MAX_WAIT_MS } from '../wait.js';
import { estimateAt, evaluateWindow, slidingWindowModel, type WindowState } from './model.js';

const RUNS = 2_000;

const window = (max: number, windowMs: number): SlidingWindowSpec => ({
  algorithm: 'sliding-window',
  max,
  windowMs,
});

function decide(state: WindowState | undefined, spec: SlidingWindowSpec, cost: number, nowMs: number) {
  slidingWindowModel.assertArguments(spec, cost);
  const evaluation = evaluateWindow(state, spec, cost, nowMs);
  if (!evaluation.allowed) return { decision: evaluation.hold(), state, ttlMs: undefined };
  const charged = evaluation.charge();
  return { decision: charged.verdict, state: charged.state, ttlMs: charged.ttlMs };
}

/** Runs requests through the model, keeping state the way a store does (absent once it no longer matters). */
class Window {
  state: WindowState | undefined;
  constructor(readonly spec: SlidingWindowSpec) {}
  take(cost: number, nowMs: number): Verdict {
    const outcome = decide(this.state, this.spec, cost, nowMs);
    if (outcome.ttlMs !== undefined) this.state = outcome.ttlMs === 0 ? undefined : outcome.state;
    return outcome.decision;
  }
}

describe('the sliding window (Cloudflare approximation)', () => {
  it('10 per minute: a burst takes the 10, the 11th waits until the previous window weighs 9', () => {
    const w = new Window(window(10, 60_000));
    for (let i = 0; i < 10; i++) expect(w.take(1, 0).allowed).toBe(true);
    // estimate 10 + previous 0; in the next window 10·(1 − e/60 s) ≤ 9 from e = 6 s on
    expect(w.take(1, 0)).toEqual({ allowed: false, level: 10, retryAfterMs: 66_000, resetMs: 120_000 });
    expect(w.take(1, 65_999).allowed).toBe(false);
    expect(w.take(1, 66_000)).toEqual({ allowed: true, level: 10, retryAfterMs: 0, resetMs: 114_000 });
    // 30 s into the second window: 1 + 10·0.5 = 6, so 4 more fit
    expect(w.take(4, 90_000)).toMatchObject({ allowed: true, level: 10 });
    expect(w.take(1, 90_000)).toMatchObject({ allowed: false, level: 10 });
  });

  it('weighs the previous window by the part of it the sliding window still covers', () => {
    // 100 per minute; 80 in the previous window; 15 s (25 %) into this one with 30 so far
    const w = new Window(window(100, 60_000));
    expect(w.take(80, 59_000).allowed).toBe(true);
    expect(w.take(30, 75_000).allowed).toBe(true);
    expect(estimateAt(w.state, 60_000, 75_000)).toBe(30 + 80 * 0.75);
    expect(w.take(11, 75_000)).toMatchObject({ allowed: false, level: 90 });
    expect(w.take(10, 75_000)).toMatchObject({ allowed: true, level: 100, resetMs: 180_000 - 75_000 });
  });

  it('windows are aligned to the epoch: a request just before an edge counts as previous just after it', () => {
    const w = new Window(window(2, 1_000));
    expect(w.take(2, 1_700_000_000_999.5).allowed).toBe(true);
    // 0.5 ms later, a new window: estimate 2·(1 − 0) = 2, still full
    expect(w.take(1, 1_700_000_001_000).allowed).toBe(false);
    expect(w.take(1, 1_700_000_001_500)).toMatchObject({ allowed: true, level: 2 });
  });

  it('a request costing more than max is never admitted and is told to retry when the window is empty', () => {
    const w = new Window(window(5, 1_000));
    expect(w.take(6, 0)).toEqual({ allowed: false, level: 0, retryAfterMs: 0, resetMs: 0 });
    w.take(3, 0);
    expect(w.take(6, 0)).toEqual({ allowed: false, level: 3, retryAfterMs: 2_000, resetMs: 2_000 });
  });

  it('a clock behind the stored window counts as that window’s start', () => {
    const w = new Window(window(10, 1_000));
    w.take(4, 5_500); // window 5
    w.take(4, 6_200); // window 6: previous 4, current 4
    // back in window 5: evaluated at 6_000 (weight 1): 4 + 4 = 8
    expect(w.take(3, 5_900)).toMatchObject({ allowed: false, level: 8 });
    expect(w.take(2, 5_900)).toMatchObject({ allowed: true, level: 10 });
    expect(w.state).toEqual({ windowIndex: 6, current: 6, previous: 4, tag: 'W10/1000' });
  });

  it('rejects limits, costs and clocks out of range with a coded error', () => {
    const bad: [SlidingWindowSpec, number, number][] = [
      [window(0, 1_000), 1, 0],
      [window(10, -1), 1, 0],
      [window(Infinity, 1_000), 1, 0],
      [window(10, Number.NaN), 1, 0],
      [window(10, 1_000), 0, 0],
      [window(10, 1_000), 1, Number.NaN],
    ];
    for (const [spec, cost, nowMs] of bad)
      expect(() => decide(undefined, spec, cost, nowMs)).toThrow(LimitArgumentError);
  });
});

interface Step {
  nowMs: number;
  cost: number;
  before: WindowState | undefined;
  after: WindowState | undefined;
  decision: Verdict;
}

const scenarioArb = windowSpecArb.chain((spec) =>
  fc.record({
    spec: fc.constant(spec),
    startMs: startMsArb,
    ops: fc.array(fc.record({ stepMs: specStepMsArb(spec), cost: specCostArb(spec) }), {
      minLength: 1,
      maxLength: 60,
      size: 'max',
    }),
  }),
);

function replay({
  spec,
  startMs,
  ops,
}: {
  spec: SlidingWindowSpec;
  startMs: number;
  ops: { stepMs: number; cost: number }[];
}): Step[] {
  const w = new Window(spec);
  let nowMs = startMs;
  return ops.map(({ stepMs, cost }) => {
    nowMs += stepMs;
    const before = w.state;
    const decision = w.take(cost, nowMs);
    return { nowMs, cost, before, after: w.state, decision };
  });
}

describe('properties over random windows, costs and clock steps', () => {
  it('the cost admitted in any aligned window never exceeds max, and in any span of one window length stays below 2·max', () => {
    fc.assert(
      fc.property(scenarioArb, (scenario) => {
        const { max, windowMs } = scenario.spec;
        const admitted = replay(scenario).filter((s) => s.decision.allowed);
        const slack = (x: number) => x + 1e-9 * (x + max);
        const perWindow = new Map<number, number>();
        for (const s of admitted) {
          const index = Math.floor(s.nowMs / windowMs);
          perWindow.set(index, (perWindow.get(index) ?? 0) + s.cost);
        }
        for (const [index, cost] of perWindow)
          if (cost > slack(max)) expect({ index, cost }).toEqual({ index, cost: max });
        for (let i = 0; i < admitted.length; i++) {
          let cost = 0;
          for (let j = i; j < admitted.length && admitted[j]!.nowMs - admitted[i]!.nowMs < windowMs; j++) {
            cost += admitted[j]!.cost;
          }
          if (!(cost < slack(2 * max))) expect({ i, cost }).toEqual({ i, cost: `< ${2 * max}` });
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('a denied request leaves the window unchanged; the level is the estimate, r = floor(max − estimate)', () => {
    fc.assert(
      fc.property(scenarioArb, (scenario) => {
        const { max, windowMs } = scenario.spec;
        for (const { decision, before, after, nowMs } of replay(scenario)) {
          expect(decision.level).toBe(estimateAt(decision.allowed ? after : before, windowMs, nowMs));
          if (!decision.allowed) expect(after).toBe(before);
          else expect(decision.level).toBeLessThanOrEqual(max);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('retryAfterMs is exact: denied one ms earlier, admitted on time', () => {
    let checked = 0;
    fc.assert(
      fc.property(scenarioArb, (scenario) => {
        const { spec } = scenario;
        for (const { decision, before, nowMs, cost } of replay(scenario)) {
          if (decision.allowed) {
            expect(decision.retryAfterMs).toBe(0);
            continue;
          }
          const wait = decision.retryAfterMs;
          expect(Number.isInteger(wait) && wait >= 0 && wait <= MAX_WAIT_MS).toBe(true);
          if (cost > spec.max) {
            expect(wait).toBe(decision.resetMs);
            continue;
          }
          expect(wait).toBeGreaterThanOrEqual(1);
          if (wait === MAX_WAIT_MS) continue;
          checked++;
          expect(decide(before, spec, cost, nowMs + wait).decision.allowed).toBe(true);
          expect(decide(before, spec, cost, nowMs + (wait - 1)).decision.allowed).toBe(false);
        }
      }),
      { numRuns: RUNS },
    );
    expect(checked).toBeGreaterThan(RUNS / 2);
  });

  it('resetMs is exact: the estimate is 0 on time, not one ms earlier; it is never more than two windows', () => {
    fc.assert(
      fc.property(scenarioArb, (scenario) => {
        const { windowMs } = scenario.spec;
        for (const { decision, before, after, nowMs } of replay(scenario)) {
          const state = decision.allowed ? after : before;
          const reset = decision.resetMs;
          expect(Number.isInteger(reset) && reset >= 0 && reset <= MAX_WAIT_MS).toBe(true);
          expect(reset).toBeLessThanOrEqual(Math.ceil(2 * windowMs) + 1);
          expect(estimateAt(state, windowMs, nowMs + reset)).toBe(0);
          if (reset > 0) expect(estimateAt(state, windowMs, nowMs + (reset - 1))).toBeGreaterThan(0);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('with no further traffic the estimate never rises (window edges included)', () => {
    fc.assert(
      fc.property(
        scenarioArb,
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 2, maxLength: 40 }),
        (scenario, fractions) => {
          const steps = replay(scenario);
          const last = steps[steps.length - 1]!;
          const { windowMs } = scenario.spec;
          const times = fractions.map((f) => last.nowMs + f * 2.5 * windowMs).sort((a, b) => a - b);
          let previous = Infinity;
          for (const t of times) {
            const estimate = estimateAt(last.after, windowMs, t);
            expect(estimate).toBeLessThanOrEqual(previous);
            previous = estimate;
          }
        },
      ),
      { numRuns: RUNS },
    );
  });
});
