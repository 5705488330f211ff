/**
 * Opaque page cursors: base64url of a small JSON object. Opaque to clients (they only pass back
 * `nextCursor`), so the encoding can change; a cursor that does not decode is answered 400.
 */
import { whyNotStorable } from './storable-string.js';

export function encodeCursor(position: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
}

/** The decoded object, or `undefined` when `cursor` is not one `encodeCursor` could have made. */
export function decodeCursor(cursor: string): Record<string, unknown> | undefined {
  if (!/^[A-Za-z0-9_-]{1,512}$/.test(cursor)) return undefined;
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    // Only what `encodeCursor` writes: strings the database can compare (a NUL would make Postgres
    // fail the query) and finite numbers.
    const fits = Object.values(value).every((v) =>
      typeof v === 'string' ? whyNotStorable(v) === undefined : Number.isFinite(v),
    );
    return fits ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
