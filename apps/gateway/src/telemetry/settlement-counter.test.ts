import { describe, expect, it } from 'vitest';
import { GatewayMetrics } from './metrics.js';

describe('settlementCounter', () => {
  it('counts each settlement event under its kind and result', async () => {
    const metrics = new GatewayMetrics({ defaultMetrics: false });
    const count = metrics.settlementCounter();
    count({ kind: 'release', ok: true });
    count({ kind: 'release', ok: true });
    count({ kind: 'refund', ok: false });
    count({ kind: 'renew', ok: true });
    const text = await metrics.registry.metrics();
    const value = (kind: string, result: string) =>
      Number(
        new RegExp(`^sluice_settlements_total\\{kind="${kind}",result="${result}"\\} (\\S+)$`, 'm').exec(
          text,
        )?.[1],
      );
    expect(value('release', 'ok')).toBe(2);
    expect(value('release', 'error')).toBe(0);
    expect(value('refund', 'error')).toBe(1);
    expect(value('refund', 'ok')).toBe(0);
    expect(value('renew', 'ok')).toBe(1);
    expect(value('charge', 'ok')).toBe(0);
  });
});
