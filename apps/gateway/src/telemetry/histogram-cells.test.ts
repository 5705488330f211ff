import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CellHistogram } from './histogram-cells.js';

describe('CellHistogram', () => {
  it('exposes exactly what a prom-client histogram would for the same observations', async () => {
    const buckets = [0.001, 0.01, 0.1];
    const observations = [0.0005, 0.001, 0.002, 0.05, 0.5, 0.01, 7];
    const ours = new Registry();
    const cells = new CellHistogram('x_seconds', 'help', 'store', buckets, ours);
    const theirs = new Registry();
    const reference = new Histogram({
      name: 'x_seconds',
      help: 'help',
      labelNames: ['store'],
      buckets,
      registers: [theirs],
    });
    for (const value of observations) {
      cells.cell('redis').observe(value);
      reference.labels('redis').observe(value);
    }
    cells.cell('local').observe(0.02);
    reference.labels('local').observe(0.02);
    const lines = (text: string) =>
      text
        .split('\n')
        .filter((line) => line !== '')
        .sort();
    expect(lines(await ours.metrics())).toEqual(lines(await theirs.metrics()));
  });
});
