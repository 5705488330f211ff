/**
 * Top offenders (docs/visibility.md): what the gateways and the rules API agree on. Each gateway
 * counts denied client keys per rule and limit, per minute, and adds its counts to one Redis sorted
 * set per (rule id, minute); the rules API merges the minutes it is asked about.
 */

/** Most items an offenders answer lists. */
export const OFFENDERS_TOP = 20;
/** How far back offenders can be asked for, minutes (and how long a gateway keeps its own). */
export const OFFENDERS_MAX_MINUTES = 60;
export const OFFENDERS_DEFAULT_MINUTES = 15;
/** A minute's sorted set outlives the longest question about it by one minute. */
export const OFFENDERS_KEY_TTL_SECONDS = (OFFENDERS_MAX_MINUTES + 1) * 60;

/** One rule's counts: minute → sorted-set member → denials. */
export type RuleOffenderCounts = ReadonlyMap<number, ReadonlyMap<string, number>>;

/** One line of an offenders answer. */
export interface OffenderItem {
  /** the client key (`ip:…`, `header:…`, `global`) */
  readonly client: string;
  /** the denying limit's name; '' for a v1 rule */
  readonly limit: string;
  /** denials counted (an upper bound once a minute had more offenders than a summary holds) */
  readonly denied: number;
  /** would-be denials of a shadow rule */
  readonly shadow: boolean;
}

/** The minute (whole minutes since the Unix epoch) a wall-clock time falls in. */
export function minuteOf(epochMs: number): number {
  return Math.floor(epochMs / 60_000);
}

/**
 * The sorted set of one rule's offenders in one minute. The rule id is the Redis Cluster hash tag, so
 * every minute of one rule lives in one slot and the rules API can merge them in one ZUNIONSTORE.
 */
export function offendersKey(prefix: string, ruleId: string, minute: number): string {
  return `${prefix}offenders:{${ruleId}}:${minute}`;
}

/** A sorted-set member: the limit, the shadow flag and the client key, as a JSON array (any client key is safe). */
export function offenderMember(limit: string, client: string, shadow: boolean): string {
  return JSON.stringify([limit, client, shadow ? 1 : 0]);
}

/** The item of a member and its score; undefined for a member this code did not write. */
export function offenderItemOf(member: string, denied: number): OffenderItem | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(member);
  } catch {
    return undefined;
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 3 ||
    typeof parsed[0] !== 'string' ||
    typeof parsed[1] !== 'string' ||
    (parsed[2] !== 0 && parsed[2] !== 1)
  ) {
    return undefined;
  }
  return { client: parsed[1], limit: parsed[0], denied, shadow: parsed[2] === 1 };
}

/** Most denied first; ties in a stable order (client, then limit). */
export function compareOffenders(a: OffenderItem, b: OffenderItem): number {
  if (a.denied !== b.denied) return b.denied - a.denied;
  if (a.client !== b.client) return a.client < b.client ? -1 : 1;
  if (a.limit !== b.limit) return a.limit < b.limit ? -1 : 1;
  return Number(a.shadow) - Number(b.shadow);
}

/** `?minutes=`: a whole number 1–60, default 15; undefined when it is not one. */
export function parseOffenderMinutes(raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return OFFENDERS_DEFAULT_MINUTES;
  const text = typeof raw === 'number' ? String(raw) : raw;
  if (typeof text !== 'string' || !/^\d{1,2}$/.test(text)) return undefined;
  const minutes = Number(text);
  return minutes >= 1 && minutes <= OFFENDERS_MAX_MINUTES ? minutes : undefined;
}
