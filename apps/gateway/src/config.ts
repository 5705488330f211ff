/**
 * The gateway's environment (SPEC §1), validated once at start. Every variable has its name, its
 * default and its check here; `loadConfig` collects every problem, one line each, so an operator
 * fixes them all in one go.
 */
import { isIP } from 'node:net';
import { normalizeHost, normalizePath } from '@sluice/shared';
import cron from 'node-cron';

export type StoreFailurePolicy = 'local' | 'open' | 'closed';

/**
 * Which forwarding headers to believe: `false` (the socket peer is the client), `true` (every hop),
 * a hop count (the n proxies nearest to us), or a list of trusted proxy addresses/CIDRs.
 */
export type TrustProxySetting = boolean | number | readonly string[];

export interface UpstreamConfig {
  /** path prefix, normalised, no trailing slash except the root `/` */
  prefix: string;
  /** origin of the upstream, e.g. `http://orders:3000` */
  origin: string;
  /** the only host (normalised) whose requests this entry takes; absent: requests for any other host */
  host?: string;
}

export interface GatewayConfig {
  /** proxy listener; 0 picks a free port */
  port: number;
  host: string;
  /** health, readiness and metrics listener; 0 picks a free port */
  adminPort: number;
  /** longest prefix first */
  upstreams: UpstreamConfig[];
  upstreamTimeoutMs: number;
  /** without a trailing slash */
  rulesApiUrl: string;
  rulesApiToken: string | undefined;
  /** node-cron expression (six fields: with seconds) */
  rulesRefresh: string;
  /** how long one snapshot request may take */
  rulesFetchTimeoutMs: number;
  redisUrl: string | undefined;
  /** prepended to every bucket key in Redis, so several deployments can share one Redis */
  redisKeyPrefix: string;
  trustProxy: TrustProxySetting;
  storeFailure: StoreFailurePolicy;
  /** longest a store decision may take before the failure policy decides instead */
  storeTimeoutMs: number;
  logLevel: string;
  /** largest proxied request body; larger ones get 413 */
  bodyLimitBytes: number;
  /** largest request head (request line and headers); larger ones get 431 */
  maxHeaderBytes: number;
  /** longest time a client may take to send a whole request (head and body) */
  requestTimeoutMs: number;
  /** longest time a client may take to send a request's head (request line and headers) */
  headersTimeoutMs: number;
  /** how long an idle keep-alive connection stays open between two requests */
  keepAliveTimeoutMs: number;
  /** longest time in-flight requests get to finish on SIGTERM before the process exits anyway */
  shutdownTimeoutMs: number;
  /** most (rule, client) denials remembered locally */
  denialCacheSize: number;
  /** most buckets in the in-process store (no Redis, or the `local` fallback) */
  localStoreMaxKeys: number;
}

export class ConfigError extends Error {
  readonly code = 'SLUICE_CONFIG_INVALID';
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n${problems.join('\n')}`);
  }
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const TRUST_PROXY_NAMES = new Set(['loopback', 'linklocal', 'uniquelocal']);
/** Characters a prefix segment may use: unreserved and sub-delims, minus `:` and `*` (router syntax). */
const PREFIX_RE = /^(\/|(\/[A-Za-z0-9._~!$&'()+,;=@-]+)+)$/;

type Env = Record<string, string | undefined>;
type Parsed<T> = { ok: T } | { problem: string };

/** Reads and checks the environment. Throws `ConfigError` listing every bad variable. */
export function loadConfig(env: Env = process.env): GatewayConfig {
  const problems: string[] = [];
  const checked = <T>(name: string, fallback: T, parse: (raw: string) => Parsed<T>): T => {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') return fallback;
    const result = parse(raw);
    if ('problem' in result) {
      problems.push(`${name}: ${result.problem}`);
      return fallback;
    }
    return result.ok;
  };
  const int =
    (min: number, max: number) =>
    (raw: string): Parsed<number> => {
      if (!/^\d+$/.test(raw)) return { problem: `"${raw}" is not a whole number` };
      const n = Number(raw);
      if (n < min || n > max) return { problem: `${n} is not between ${min} and ${max}` };
      return { ok: n };
    };

  const port = checked('PORT', 8080, int(0, 65535));
  const adminPort = checked('ADMIN_PORT', 9090, int(0, 65535));
  if (port === adminPort && port !== 0 && env.ADMIN_PORT?.trim()) {
    problems.push(
      `ADMIN_PORT: must differ from PORT (${port}); the admin listener is never on the proxy port`,
    );
  } else if (port === adminPort && port !== 0) {
    problems.push(
      `PORT: must differ from ADMIN_PORT (${adminPort}); the admin listener is never on the proxy port`,
    );
  }
  const host = env.HOST?.trim() || '0.0.0.0';

  let upstreams: UpstreamConfig[] = [];
  const upstreamsRaw = env.UPSTREAMS?.trim();
  if (!upstreamsRaw) {
    problems.push(
      'UPSTREAMS: required: comma-separated prefix=url pairs, e.g. /orders=http://orders:3000,/=http://web:3000',
    );
  } else {
    const parsed = parseUpstreams(upstreamsRaw);
    if (typeof parsed === 'string') problems.push(`UPSTREAMS: ${parsed}`);
    else upstreams = parsed;
  }

  const upstreamTimeoutMs = checked('UPSTREAM_TIMEOUT_MS', 30_000, int(1, 3_600_000));

  let rulesApiUrl = '';
  const rulesApiRaw = env.RULES_API_URL?.trim();
  if (!rulesApiRaw) {
    problems.push('RULES_API_URL: required, e.g. http://rules-api:8081');
  } else {
    const url = parseHttpUrl(rulesApiRaw);
    if (typeof url === 'string') problems.push(`RULES_API_URL: ${url}`);
    else rulesApiUrl = url.href.replace(/\/+$/, '');
  }
  const rulesApiToken = env.RULES_API_TOKEN?.trim() || undefined;

  const rulesRefresh = checked<string>('RULES_REFRESH', '*/5 * * * * *', (raw) =>
    cron.validate(raw)
      ? { ok: raw }
      : { problem: `"${raw}" is not a node-cron expression (six fields with seconds, e.g. */5 * * * * *)` },
  );
  const rulesFetchTimeoutMs = checked('RULES_FETCH_TIMEOUT_MS', 5_000, int(1, 600_000));

  const redisUrl = checked<string | undefined>('REDIS_URL', undefined, (raw) => {
    try {
      const url = new URL(raw);
      if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
        return { problem: 'must start with redis:// or rediss://' };
      }
      return { ok: raw };
    } catch {
      return { problem: 'is not a URL like redis://host:6379' };
    }
  });
  const redisKeyPrefix = env.REDIS_KEY_PREFIX ?? 'sluice:';

  const trustProxy = checked<TrustProxySetting>('TRUST_PROXY', false, parseTrustProxy);

  const storeFailure = checked<StoreFailurePolicy>('STORE_FAILURE', 'local', (raw) =>
    raw === 'local' || raw === 'open' || raw === 'closed'
      ? { ok: raw }
      : { problem: `"${raw}" is not one of local, open, closed` },
  );
  const storeTimeoutMs = checked('STORE_TIMEOUT_MS', 50, int(1, 60_000));

  const logLevel = checked<string>('LOG_LEVEL', 'info', (raw) =>
    LOG_LEVELS.includes(raw) ? { ok: raw } : { problem: `"${raw}" is not one of ${LOG_LEVELS.join(', ')}` },
  );
  const bodyLimitBytes = checked('BODY_LIMIT_BYTES', 10 * 1024 * 1024, int(0, 2 ** 40));
  const maxHeaderBytes = checked('MAX_HEADER_BYTES', 16 * 1024, int(1024, 1024 * 1024));
  const requestTimeoutMs = checked('REQUEST_TIMEOUT_MS', 120_000, int(1, 3_600_000));
  const headersTimeoutMs = checked('HEADERS_TIMEOUT_MS', 10_000, int(1, 3_600_000));
  if (headersTimeoutMs > requestTimeoutMs) {
    problems.push(
      `HEADERS_TIMEOUT_MS: ${headersTimeoutMs} must not exceed REQUEST_TIMEOUT_MS (${requestTimeoutMs}): the head is part of the request`,
    );
  }
  const keepAliveTimeoutMs = checked('KEEP_ALIVE_TIMEOUT_MS', 72_000, int(1, 3_600_000));
  const shutdownTimeoutMs = checked('SHUTDOWN_TIMEOUT_MS', 10_000, int(0, 3_600_000));
  const denialCacheSize = checked('DENIAL_CACHE_SIZE', 10_000, int(0, 10_000_000));
  const localStoreMaxKeys = checked('LOCAL_STORE_MAX_KEYS', 100_000, int(1, 100_000_000));

  if (problems.length > 0) throw new ConfigError(problems);
  return {
    port,
    host,
    adminPort,
    upstreams,
    upstreamTimeoutMs,
    rulesApiUrl,
    rulesApiToken,
    rulesRefresh,
    rulesFetchTimeoutMs,
    redisUrl,
    redisKeyPrefix,
    trustProxy,
    storeFailure,
    storeTimeoutMs,
    logLevel,
    bodyLimitBytes,
    maxHeaderBytes,
    requestTimeoutMs,
    headersTimeoutMs,
    keepAliveTimeoutMs,
    shutdownTimeoutMs,
    denialCacheSize,
    localStoreMaxKeys,
  };
}

function parseHttpUrl(raw: string): URL | string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `"${raw}" is not a URL`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return `"${raw}" must start with http:// or https://`;
  if (url.search || url.hash || url.username || url.password) {
    return `"${raw}" must not carry a query, a fragment or credentials`;
  }
  return url;
}

/**
 * `[host]prefix=url,…` → upstreams sorted longest prefix first (an entry naming a host before one
 * that does not, at equal length); a string is the problem.
 */
export function parseUpstreams(raw: string): UpstreamConfig[] | string {
  const upstreams: UpstreamConfig[] = [];
  for (const pair of raw.split(',')) {
    const item = pair.trim();
    if (item === '') continue;
    const eq = item.indexOf('=');
    if (eq <= 0) return `"${item}" is not a prefix=url pair`;
    const entry = item.slice(0, eq).trim();
    const target = item.slice(eq + 1).trim();
    const slash = entry.indexOf('/');
    let host: string | undefined;
    if (slash > 0) {
      const normal = normalizeHost(entry.slice(0, slash));
      if (!normal.ok || normal.host === '') {
        return `host "${entry.slice(0, slash)}" of "${entry}" must be a host name like api.example.com`;
      }
      host = normal.host;
    }
    const prefix = slash > 0 ? entry.slice(slash) : entry;
    const normal = normalizePath(prefix);
    if (!PREFIX_RE.test(prefix) || !normal.ok || normal.path !== prefix || prefix.endsWith('/.')) {
      return `prefix "${prefix}" must be a normalised path like /orders (no trailing slash, no ":", "*", "%", "?" or dot segments)`;
    }
    if (prefix.length > 1 && prefix.endsWith('/')) return `prefix "${prefix}" must not end with "/"`;
    const url = parseHttpUrl(target);
    if (typeof url === 'string') return `upstream of ${prefix}: ${url}`;
    if (url.pathname !== '/') {
      return `upstream of ${prefix}: "${target}" must be an origin like http://host:3000 (no path: the request path is forwarded as is)`;
    }
    if (upstreams.some((u) => u.prefix === prefix && u.host === host))
      return `prefix "${entry}" appears twice`;
    upstreams.push(
      host === undefined ? { prefix, origin: url.origin } : { prefix, origin: url.origin, host },
    );
  }
  if (upstreams.length === 0) return 'no prefix=url pair';
  upstreams.sort(
    (a, b) =>
      b.prefix.length - a.prefix.length || Number(b.host !== undefined) - Number(a.host !== undefined),
  );
  return upstreams;
}

function parseTrustProxy(raw: string): Parsed<TrustProxySetting> {
  const lower = raw.toLowerCase();
  if (lower === 'false') return { ok: false };
  if (lower === 'true') return { ok: true };
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops > 100) return { problem: `${hops} hops is not plausible (at most 100)` };
    return { ok: hops === 0 ? false : hops };
  }
  const entries = raw
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  for (const entry of entries) {
    if (!isTrustedProxyEntry(entry)) {
      return {
        problem: `"${entry}" is not true, false, a hop count, an IP address, a CIDR (10.0.0.0/8) or one of loopback, linklocal, uniquelocal`,
      };
    }
  }
  return { ok: entries };
}

function isTrustedProxyEntry(entry: string): boolean {
  if (TRUST_PROXY_NAMES.has(entry)) return true;
  const slash = entry.indexOf('/');
  const address = slash === -1 ? entry : entry.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return false;
  if (slash === -1) return true;
  const bits = entry.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

/** What Fastify's `trustProxy` option takes for a setting. */
export function fastifyTrustProxy(
  setting: TrustProxySetting,
): boolean | string | ((address: string, hop: number) => boolean) {
  if (typeof setting === 'boolean') return setting;
  // Fastify 5.12 treats a bare number as "trust nobody"; the documented meaning (as in Express and
  // proxy-addr) is "trust the n hops nearest to us", which this function says explicitly.
  if (typeof setting === 'number') return (_address: string, hop: number) => hop < setting;
  return setting.join(',');
}
