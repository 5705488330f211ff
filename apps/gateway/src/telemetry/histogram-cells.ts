/**
 * A Prometheus histogram whose observations cost a loop over a few bucket bounds and three additions:
 * prom-client's `observe` validates and hashes its labels on every call, even on a child from
 * `labels()`, which on the request path (one observation per store decision) costs more than the rest
 * of the bookkeeping together. Each label value gets a cell of plain numbers; the registry reads the
 * cells when Prometheus scrapes, in prom-client's own exposition (registered as a custom metric).
 */
import type { Registry } from 'prom-client';

export class HistogramCell {
  /** observations per bucket (not cumulative); the last one is +Inf */
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly upperBounds: readonly number[]) {
    this.counts = new Array<number>(upperBounds.length + 1).fill(0);
  }

  observe(value: number): void {
    const bounds = this.upperBounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

interface MetricValue {
  value: number;
  labels: Record<string, string | number>;
  metricName: string;
}

/** One label (e.g. `store`), a cell per value, exposed as `<name>_bucket/_sum/_count`. */
export class CellHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly labelNames: readonly string[];
  readonly #cells = new Map<string, HistogramCell>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelName: string,
    readonly upperBounds: readonly number[],
    registry: Registry,
  ) {
    this.labelNames = [labelName];
    // a custom metric: the registry asks it for its values at each scrape
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  /** The cell of one label value (the same cell for the same value). */
  cell(labelValue: string): HistogramCell {
    let cell = this.#cells.get(labelValue);
    if (cell === undefined) {
      cell = new HistogramCell(this.upperBounds);
      this.#cells.set(labelValue, cell);
    }
    return cell;
  }

  async get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: MetricValue[];
  }> {
    const values: MetricValue[] = [];
    for (const [labelValue, cell] of this.#cells) {
      let cumulative = 0;
      for (let i = 0; i <= this.upperBounds.length; i++) {
        cumulative += cell.counts[i]!;
        values.push({
          value: cumulative,
          labels: {
            le: i < this.upperBounds.length ? this.upperBounds[i]! : '+Inf',
            [this.labelName]: labelValue,
          },
          metricName: `${this.name}_bucket`,
        });
      }
      values.push({
        value: cell.sum,
        labels: { [this.labelName]: labelValue },
        metricName: `${this.name}_sum`,
      });
      values.push({
        value: cell.count,
        labels: { [this.labelName]: labelValue },
        metricName: `${this.name}_count`,
      });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    this.#cells.clear();
  }
}
