/**
 * Top offenders without a Redis (ANALYTICS_GATEWAYS, docs/visibility.md): ask each listed gateway's admin
 * `GET /offenders?rule=<name>&minutes=N` in parallel, each bounded by a timeout, and sum their answers by
 * (client, limit, shadow). What the embedded demo uses: one gateway, no Redis.
 */
import { compareOffenders, OFFENDERS_TOP, type OffenderItem, offenderMember } from '@sluice/shared';

/** Each gateway gets this long to answer; one that does not is skipped, never waited on longer. */
export const GATEWAY_TIMEOUT_MS = 2_000;

export interface SkippedGateway {
  url: string;
  /** why it was skipped, for the log and the 503 message */
  reason: string;
}

export interface GatewaysOffenders {
  /** the top 20 summed over the gateways that answered, most denied first */
  items: OffenderItem[];
  /** the base URLs that answered */
  answered: string[];
  skipped: SkippedGateway[];
}

export interface AskGatewaysOptions {
  /** gateway admin base URLs, without a trailing slash */
  gateways: readonly string[];
  /** the rule's name (a gateway knows its rules by name) */
  ruleName: string;
  minutes: number;
  timeoutMs?: number;
  /** GATEWAY_ADMIN_TOKEN, sent as a bearer token */
  adminToken?: string | undefined;
}

export async function readGatewayOffenders(options: AskGatewaysOptions): Promise<GatewaysOffenders> {
  const timeoutMs = options.timeoutMs ?? GATEWAY_TIMEOUT_MS;
  const answers = await Promise.all(
    options.gateways.map((url) =>
      askGateway(url, options.ruleName, options.minutes, timeoutMs, options.adminToken),
    ),
  );
  const answered: string[] = [];
  const skipped: SkippedGateway[] = [];
  const lists: OffenderItem[][] = [];
  options.gateways.forEach((url, index) => {
    const answer = answers[index]!;
    if ('reason' in answer) {
      skipped.push({ url, reason: answer.reason });
    } else {
      answered.push(url);
      lists.push(answer.items);
    }
  });
  return { items: mergeOffenders(lists), answered, skipped };
}

/** Sums the lists by (client, limit, shadow); the top 20, most denied first. */
export function mergeOffenders(lists: ReadonlyArray<readonly OffenderItem[]>): OffenderItem[] {
  const sums = new Map<string, OffenderItem>();
  for (const item of lists.flat()) {
    const key = offenderMember(item.limit, item.client, item.shadow);
    const seen = sums.get(key);
    sums.set(key, seen === undefined ? item : { ...seen, denied: seen.denied + item.denied });
  }
  return [...sums.values()].sort(compareOffenders).slice(0, OFFENDERS_TOP);
}

async function askGateway(
  baseUrl: string,
  ruleName: string,
  minutes: number,
  timeoutMs: number,
  adminToken: string | undefined,
): Promise<{ items: OffenderItem[] } | { reason: string }> {
  const url = `${baseUrl}/offenders?${new URLSearchParams({ rule: ruleName, minutes: String(minutes) })}`;
  try {
    const response = await fetch(url, {
      signal: AbortSignal.timeout(timeoutMs),
      headers: adminToken === undefined ? {} : { authorization: `Bearer ${adminToken}` },
    });
    const body: unknown = await response.json().catch(() => undefined);
    // A gateway without this rule enabled (disabled, or not refreshed yet) saw no denials under it.
    if (response.status === 404 && errorCode(body) === 'SLUICE_RULE_NOT_FOUND') return { items: [] };
    if (response.status !== 200) {
      return { reason: `HTTP ${response.status}${errorCode(body) ? ` ${errorCode(body)}` : ''}` };
    }
    const items = itemsOf(body);
    return items === undefined ? { reason: 'not an offenders answer' } : { items };
  } catch (error) {
    const err = error as Error & { cause?: { code?: string } };
    if (err.name === 'TimeoutError') return { reason: `no answer within ${timeoutMs} ms` };
    return { reason: err.cause?.code ?? err.message };
  }
}

function errorCode(body: unknown): string | undefined {
  const code = (body as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

function itemsOf(body: unknown): OffenderItem[] | undefined {
  const items = (body as { items?: unknown } | undefined)?.items;
  if (!Array.isArray(items)) return undefined;
  const valid = items.every(
    (item) =>
      typeof item === 'object' &&
      item !== null &&
      typeof item.client === 'string' &&
      typeof item.limit === 'string' &&
      Number.isSafeInteger(item.denied) &&
      item.denied >= 0 &&
      typeof item.shadow === 'boolean',
  );
  return valid
    ? items.map(({ client, limit, denied, shadow }) => ({ client, limit, denied, shadow }))
    : undefined;
}
