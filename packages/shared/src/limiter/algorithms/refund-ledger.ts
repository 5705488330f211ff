/**
 * Refunds are bounded (SPEC §5, `refund.max`): what refunds give back to one limit and client is
 * counted as a level that drains at `refundMax` per period (the limit's refill period, or its window);
 * a refund gives back only what keeps that level within `refundMax`, and past it a refundable answer
 * keeps its cost. So a client that can provoke refundable statuses gets at most `refundMax` extra per
 * period, never an unlimited stream. The twin of `grantRefund` in acquire.lua (same double operations
 * in the same order); the level lives under its own key beside the limit's state, off the decision path.
 */

/** Where a limit's refunds are counted: `<key>|refunds` (a limit name cannot hold '|'). */
export function refundLedgerKey(key: string): string {
  return `${key}|refunds`;
}

/** What the ledger holds; in Redis the string `"<level> <updatedAtMs>"` ('%.17g' each). */
export interface RefundLevel {
  readonly level: number;
  readonly updatedAtMs: number;
}

/**
 * A refund about to be applied: gives back at most what the ledger allows of `amount`, given the
 * limit's period (ms over which `refundMax` drains); returns what is given back.
 */
export type GrantRefund = (amount: number, periodMs: number) => number;

/** Where the ledger is read and written (a store's table; `ttlMs` as `StateTable.set`). */
export interface LedgerTable {
  get(key: string): unknown;
  set(key: string, state: unknown, ttlMs: number): void;
}

/** The `GrantRefund` of one settlement of `key`, bounded by `refundMax` per period, at `nowMs`. */
export function refundGrant(table: LedgerTable, key: string, refundMax: number, nowMs: number): GrantRefund {
  return (amount, periodMs) => {
    const ledgerKey = refundLedgerKey(key);
    let level = 0;
    let updatedAtMs = nowMs;
    const stored = table.get(ledgerKey);
    if (isRefundLevel(stored)) {
      let elapsedMs = nowMs - stored.updatedAtMs;
      if (!(elapsedMs > 0)) elapsedMs = 0; // a clock going backwards drains nothing
      level = Math.max(0, stored.level - (elapsedMs * refundMax) / periodMs);
      updatedAtMs = Math.max(nowMs, stored.updatedAtMs);
    }
    const granted = Math.min(amount, refundMax - level);
    if (!(granted > 0)) return 0;
    level = level + granted;
    table.set(ledgerKey, { level, updatedAtMs }, Math.ceil((level * periodMs) / refundMax));
    return granted;
  };
}

function isRefundLevel(state: unknown): state is RefundLevel {
  return (
    typeof state === 'object' &&
    state !== null &&
    typeof (state as RefundLevel).level === 'number' &&
    typeof (state as RefundLevel).updatedAtMs === 'number'
  );
}
