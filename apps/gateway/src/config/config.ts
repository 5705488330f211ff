/**
 * The gateway's environment, validated once at start (docs/configuration.md). Every variable is
 * declared once in `GATEWAY_ENV`, with its default, bounds and meaning; `loadConfig` collects every
 * problem, one line per bad variable, so an operator fixes them all in one go.
 */
import { isIP } from 'node:net';
import proxyAddr from '@fastify/proxy-addr';
import {
  ConfigError,
  type EnvSource,
  envCustom,
  envInteger,
  envOneOf,
  envSeedList,
  envText,
  envUrl,
  got,
  IDENTITY_ENV,
  identityConfig,
  type JwtConfig,
  LOG_LEVEL_VAR,
  normalizeHost,
  normalizePath,
  type Parsed,
  readEnv,
  type StoreFailurePolicy,
} from '@sluice/shared';
import cron from 'node-cron';

export type { StoreFailurePolicy };
export { ConfigError };

/**
 * Which forwarding headers to believe: `false` (the socket peer is the client), `true` (every hop),
 * a hop count (the n proxies nearest to us), or a list of trusted proxy addresses/CIDRs.
 */
export type TrustProxySetting = boolean | number | readonly string[];

/** Which forwarding headers the gateway writes on proxied requests (docs/gateway.md). */
export type ForwardedHeadersMode = 'x-forwarded' | 'forwarded' | 'both' | 'none';

/** Options an UPSTREAMS entry may carry after its origin, each written `;name`. */
const UPSTREAM_OPTIONS = ['preserveHost'] as const;

export interface UpstreamConfig {
  /** path prefix, normalised, no trailing slash except the root `/` */
  prefix: string;
  /** origin of the upstream, e.g. `http://orders:3000` */
  origin: string;
  /**
   * the only host this entry takes: lower case, without port or trailing dot (`api.example.com`,
   * `[::1]`); absent: the entry takes requests for any host no other entry names
   */
  host?: string;
  /**
   * `;preserveHost`: the upstream gets the client's Host (as the gateway normalised it, with its
   * port) instead of its own
   */
  preserveHost?: true;
}

export interface GatewayConfig {
  /** proxy listener; 0 picks a free port */
  port: number;
  host: string;
  /** health, readiness and metrics listener; 0 picks a free port */
  adminPort: number;
  /** entries naming a host first (grouped by host), then the others; longest prefix first in each group */
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
  /** seed nodes (`host:port`) of a Redis Cluster; never set together with `redisUrl` */
  redisClusterNodes: string[] | undefined;
  /** prepended to every bucket key in Redis, so several deployments can share one Redis */
  redisKeyPrefix: string;
  trustProxy: TrustProxySetting;
  forwardedHeaders: ForwardedHeadersMode;
  storeFailure: StoreFailurePolicy;
  /** longest a store decision may take before the failure policy decides instead */
  storeTimeoutMs: number;
  logLevel: string;
  /** largest proxied request body; larger ones get 413 */
  bodyLimitBytes: number;
  /** largest request head (request line and headers); larger ones get 431 */
  maxHeaderBytes: number;
  /** most header lines in a request head; more get 431 (never a silent drop of the rest) */
  maxHeaderCount: number;
  /** longest time a client may take to send a whole request (head and body) */
  requestTimeoutMs: number;
  /** longest time a client may take to send the request head; at most `requestTimeoutMs` */
  headersTimeoutMs: number;
  /** how long an idle keep-alive connection stays open between requests */
  keepAliveTimeoutMs: number;
  /** longest time in-flight exchanges get to finish on SIGTERM before what is left is closed (WebSockets: 1001) */
  shutdownTimeoutMs: number;
  /** most (rule, client) denials remembered locally */
  denialCacheSize: number;
  /** lease mode: how long a lease lasts at most, and how much traffic it is sized for, ms */
  leaseMs: number;
  /** most buckets in the in-process store (no Redis, or the `local` fallback) */
  localStoreMaxKeys: number;
  /** how bearer tokens are verified (JWT_*); undefined: every request is unauthenticated */
  jwt: JwtConfig | undefined;
  /** CLIENT_KEY_SECRET: the HMAC key of credential client keys; undefined: plain SHA-256 (warned) */
  clientKeySecret: string | undefined;
  /** GATEWAY_ADMIN_TOKEN: the bearer token /usage and /offenders require; undefined: open */
  adminToken: string | undefined;
}

const TRUST_PROXY_NAMES = new Set(['loopback', 'linklocal', 'uniquelocal']);
/** Characters a prefix segment may use: unreserved and sub-delims, minus `:` and `*` (router syntax). */
const PREFIX_RE = /^(\/|(\/[A-Za-z0-9._~!$&'()+,;=@-]+)+)$/;
/** Characters a Redis key prefix may use; braces are refused separately, with the reason. */
const KEY_PREFIX_RE = /^[A-Za-z0-9:._/-]{1,64}$/;

export const GATEWAY_ENV = {
  PORT: envInteger({
    description: 'the proxy listener port; 0 picks a free port',
    default: 8080,
    min: 0,
    max: 65535,
  }),
  HOST: envText({
    description: 'listen address of both listeners',
    default: '0.0.0.0',
    accepts: 'IP address or host name',
  }),
  ADMIN_PORT: envInteger({
    description:
      'the admin listener port (/healthz, /readyz, /metrics); must differ from PORT; 0 picks a free port',
    default: 9090,
    min: 0,
    max: 65535,
  }),
  UPSTREAMS: envCustom({
    description:
      'where requests go: comma-separated prefix=url entries, the longest matching prefix wins; an entry may name a host (api.example.com/orders=url) and end in ;preserveHost',
    accepts: 'comma-separated [host]/prefix=origin[;preserveHost] entries',
    required: true,
    example: '/orders=http://orders:3000,/=http://web:3000',
    parse: (raw): Parsed<UpstreamConfig[]> => {
      const parsed = parseUpstreams(raw);
      return typeof parsed === 'string' ? { problem: parsed } : { value: parsed };
    },
  }),
  UPSTREAM_TIMEOUT_MS: envInteger({
    description: 'an upstream that has not sent its response headers by then gets the client a 504',
    default: 30_000,
    min: 1,
    max: 3_600_000,
  }),
  RULES_API_URL: envCustom({
    description: 'the rules API the gateway reads its rules from',
    accepts: 'http:// or https:// URL without query, fragment or credentials',
    required: true,
    example: 'http://rules-api:8081',
    parse: (raw): Parsed<string> => {
      const url = parseHttpUrl(raw, 'http://rules-api:8081');
      if (typeof url === 'string') return { problem: url };
      if (url.username || url.password) {
        return { problem: 'must not carry credentials (set RULES_API_TOKEN instead)' };
      }
      if (url.search || url.hash) return { problem: `must not carry a query or a fragment ${got(raw)}` };
      return { value: url.href.replace(/\/+$/, '') };
    },
  }),
  RULES_API_TOKEN: envText({
    description: 'bearer token for the rules API (the read token is enough)',
    secret: true,
  }),
  RULES_REFRESH: envCustom({
    description: 'how often to ask the rules API for changes (a 304 when nothing changed)',
    accepts: 'node-cron expression with seconds (six fields)',
    default: '*/5 * * * * *',
    parse: (raw): Parsed<string> =>
      cron.validate(raw)
        ? { value: raw }
        : {
            problem: `must be a node-cron expression with seconds (six fields, e.g. */5 * * * * *) ${got(raw)}`,
          },
  }),
  RULES_FETCH_TIMEOUT_MS: envInteger({
    description: 'longest one rules request may take; on failure the gateway keeps its last rules',
    default: 5_000,
    min: 1,
    max: 600_000,
  }),
  REDIS_URL: envUrl({
    description:
      'the Redis that holds the buckets; unset: in-process buckets, one gateway only (logged as a warning)',
    protocols: ['redis:', 'rediss:'],
    example: 'redis://host:6379',
    // may carry a password
    secret: true,
  }),
  REDIS_CLUSTER_NODES: envSeedList(
    'instead of REDIS_URL: seed nodes of the Redis Cluster that holds the buckets (any few of its nodes; the rest are discovered)',
  ),
  REDIS_KEY_PREFIX: envCustom({
    description: 'prepended to every bucket key, so several deployments can share one Redis',
    accepts: '1–64 of A-Z a-z 0-9 : . _ - /',
    default: 'sluice:',
    parse: (raw): Parsed<string> => {
      if (/[{}]/.test(raw)) {
        return {
          problem: `must not contain { or }: bucket keys keep a Redis Cluster hash tag {…} after the prefix, which a brace in the prefix would move ${got(raw)}`,
        };
      }
      if (!KEY_PREFIX_RE.test(raw)) {
        return { problem: `must be 1 to 64 of the characters A-Z a-z 0-9 : . _ - / ${got(raw)}` };
      }
      return { value: raw };
    },
  }),
  TRUST_PROXY: envCustom({
    description: 'which X-Forwarded-For hops to believe; false: the client IP is the socket peer',
    accepts:
      'false, true, a hop count 0–100, or comma-separated IP addresses, CIDRs, loopback, linklocal, uniquelocal',
    default: false as TrustProxySetting,
    parse: parseTrustProxy,
  }),
  FORWARDED_HEADERS: envOneOf({
    description:
      'the forwarding headers set on proxied requests: x-forwarded (X-Forwarded-For, -Proto, -Host, -Port), forwarded (RFC 7239), both, or none',
    values: ['x-forwarded', 'forwarded', 'both', 'none'],
    default: 'x-forwarded',
  }),
  STORE_FAILURE: envOneOf({
    description:
      'when Redis fails or is slower than STORE_TIMEOUT_MS: local decides with an in-process bucket, open admits, closed answers 503',
    values: ['local', 'open', 'closed'],
    default: 'local',
  }),
  STORE_TIMEOUT_MS: envInteger({
    description: 'longest a store decision may take before STORE_FAILURE decides instead',
    default: 50,
    min: 1,
    max: 60_000,
  }),
  LOG_LEVEL: LOG_LEVEL_VAR,
  BODY_LIMIT_BYTES: envInteger({
    description: 'largest proxied request body (larger: 413)',
    default: 10 * 1024 * 1024,
    min: 0,
    max: 2 ** 40,
  }),
  MAX_HEADER_BYTES: envInteger({
    description: 'largest request head, request line and headers (larger: 431)',
    default: 16 * 1024,
    min: 1024,
    max: 1024 * 1024,
  }),
  MAX_HEADER_COUNT: envInteger({
    description: 'most header lines in a request (more: 431, none is dropped silently)',
    default: 200,
    min: 1,
    max: 10_000,
  }),
  REQUEST_TIMEOUT_MS: envInteger({
    description:
      'longest a client may take to send a whole request, head and body (then 408 and the connection closes)',
    default: 120_000,
    min: 1,
    max: 3_600_000,
  }),
  HEADERS_TIMEOUT_MS: envInteger({
    description: 'longest a client may take to send the request head; at most REQUEST_TIMEOUT_MS',
    default: 10_000,
    min: 1,
    max: 3_600_000,
  }),
  KEEP_ALIVE_TIMEOUT_MS: envInteger({
    description: 'how long an idle keep-alive connection stays open waiting for the next request',
    default: 72_000,
    min: 1,
    max: 600_000,
  }),
  SHUTDOWN_TIMEOUT_MS: envInteger({
    description:
      'on SIGTERM, how long in-flight requests and WebSockets get to finish; then WebSockets are closed (1001) and what still runs is cut',
    default: 10_000,
    min: 0,
    max: 3_600_000,
  }),
  DENIAL_CACHE_SIZE: envInteger({
    description:
      '(rule, client) denials remembered locally, so a denied client costs no Redis round trip; 0 turns it off',
    default: 10_000,
    min: 0,
    max: 10_000_000,
  }),
  LEASE_MS: envInteger({
    description:
      "lease mode: a lease holds about this many ms of a key's traffic and its unused tokens go back at most this long after it was taken",
    default: 100,
    min: 1,
    max: 60_000,
  }),
  LOCAL_STORE_MAX_KEYS: envInteger({
    description:
      'most buckets in the in-process store (no Redis, or the local fallback); least recently used go first',
    default: 100_000,
    min: 1,
    max: 100_000_000,
  }),
  ...IDENTITY_ENV,
  GATEWAY_ADMIN_TOKEN: envText({
    description:
      'when set, the admin answers that name clients (/usage, /offenders) require it as a bearer token; /healthz, /readyz and /metrics stay open',
    secret: true,
  }),
};

/** Reads and checks the environment. Throws `ConfigError` listing every bad variable. */
export function loadConfig(env: EnvSource = process.env): GatewayConfig {
  const reading = readEnv(GATEWAY_ENV, env);

  const port = reading.get('PORT');
  const adminPort = reading.get('ADMIN_PORT');
  if (port !== undefined && port === adminPort && port !== 0) {
    if (reading.isSet('ADMIN_PORT')) {
      reading.report(
        'ADMIN_PORT',
        `must differ from PORT (${port}); the admin listener is never on the proxy port`,
      );
    } else {
      reading.report(
        'PORT',
        `must differ from ADMIN_PORT (${adminPort}); the admin listener is never on the proxy port`,
      );
    }
  }

  const requestTimeoutMs = reading.get('REQUEST_TIMEOUT_MS');
  const headersTimeoutMs = reading.get('HEADERS_TIMEOUT_MS');
  if (
    requestTimeoutMs !== undefined &&
    headersTimeoutMs !== undefined &&
    headersTimeoutMs > requestTimeoutMs
  ) {
    // Blame the variable the operator set; with both set, the headers timeout is the odd one out.
    if (reading.isSet('HEADERS_TIMEOUT_MS')) {
      reading.report(
        'HEADERS_TIMEOUT_MS',
        `must not exceed REQUEST_TIMEOUT_MS (${requestTimeoutMs}): the head is part of the request ${got(String(headersTimeoutMs))}`,
      );
    } else {
      reading.report(
        'REQUEST_TIMEOUT_MS',
        `must be at least HEADERS_TIMEOUT_MS (${headersTimeoutMs}, its default): the head is part of the request ${got(String(requestTimeoutMs))}`,
      );
    }
  }

  if (reading.isSet('REDIS_URL') && reading.isSet('REDIS_CLUSTER_NODES')) {
    reading.report(
      'REDIS_CLUSTER_NODES',
      'must not be set together with REDIS_URL: set REDIS_URL for one Redis, REDIS_CLUSTER_NODES for a Redis Cluster',
    );
  }

  const identity = identityConfig(reading);
  const v = reading.values();
  return {
    port: v.PORT,
    host: v.HOST,
    adminPort: v.ADMIN_PORT,
    upstreams: v.UPSTREAMS,
    upstreamTimeoutMs: v.UPSTREAM_TIMEOUT_MS,
    rulesApiUrl: v.RULES_API_URL,
    rulesApiToken: v.RULES_API_TOKEN,
    rulesRefresh: v.RULES_REFRESH,
    rulesFetchTimeoutMs: v.RULES_FETCH_TIMEOUT_MS,
    redisUrl: v.REDIS_URL,
    redisClusterNodes: v.REDIS_CLUSTER_NODES,
    redisKeyPrefix: v.REDIS_KEY_PREFIX,
    trustProxy: v.TRUST_PROXY,
    forwardedHeaders: v.FORWARDED_HEADERS,
    storeFailure: v.STORE_FAILURE,
    storeTimeoutMs: v.STORE_TIMEOUT_MS,
    logLevel: v.LOG_LEVEL,
    bodyLimitBytes: v.BODY_LIMIT_BYTES,
    maxHeaderBytes: v.MAX_HEADER_BYTES,
    maxHeaderCount: v.MAX_HEADER_COUNT,
    requestTimeoutMs: v.REQUEST_TIMEOUT_MS,
    headersTimeoutMs: v.HEADERS_TIMEOUT_MS,
    keepAliveTimeoutMs: v.KEEP_ALIVE_TIMEOUT_MS,
    shutdownTimeoutMs: v.SHUTDOWN_TIMEOUT_MS,
    denialCacheSize: v.DENIAL_CACHE_SIZE,
    leaseMs: v.LEASE_MS,
    localStoreMaxKeys: v.LOCAL_STORE_MAX_KEYS,
    jwt: identity.jwt,
    clientKeySecret: identity.clientKeySecret,
    adminToken: v.GATEWAY_ADMIN_TOKEN,
  };
}

/** An http(s) URL, or the problem with it (after `NAME: `). */
function parseHttpUrl(raw: string, example: string): URL | string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `must be a URL like ${example} ${got(raw)}`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `must start with http:// or https:// ${got(raw)}`;
  }
  return url;
}

/**
 * `[host]/prefix=url[;option…],…` → upstreams, entries naming a host first (grouped by host), then
 * the others, longest prefix first within each group; a string is the problem (after `UPSTREAMS: `).
 */
export function parseUpstreams(raw: string): UpstreamConfig[] | string {
  const upstreams: UpstreamConfig[] = [];
  for (const part of raw.split(',')) {
    const entry = part.trim();
    if (entry === '') continue;
    const problem = (what: string) => `entry ${JSON.stringify(entry)}: ${what}`;
    const eq = entry.indexOf('=');
    if (eq <= 0) return problem('must be prefix=url or host/prefix=url');
    const key = entry.slice(0, eq).trim();
    // an origin has no path, so no `;`: what follows one is the entry's options
    const [origin, ...options] = entry.slice(eq + 1).split(';');
    const target = origin!.trim();
    let preserveHost = false;
    for (const raw of options) {
      const option = raw.trim();
      if (option === 'preserveHost') preserveHost = true;
      else
        return problem(
          `unknown option ${JSON.stringify(option)} after the origin (an option is one of ${UPSTREAM_OPTIONS.map((o) => `;${o}`).join(', ')})`,
        );
    }

    let host: string | undefined;
    let prefix = key;
    if (!key.startsWith('/')) {
      const slash = key.indexOf('/');
      if (slash === -1) {
        return problem(
          'must start with a path prefix like /orders, or a host and a prefix like api.example.com/orders (a whole host: api.example.com/)',
        );
      }
      const parsedHost = parseUpstreamHost(key.slice(0, slash));
      if ('problem' in parsedHost) return problem(parsedHost.problem);
      host = parsedHost.value;
      prefix = key.slice(slash);
    }

    const normal = normalizePath(prefix);
    if (!PREFIX_RE.test(prefix) || !normal.ok || normal.path !== prefix || prefix.endsWith('/.')) {
      return problem(
        `prefix "${prefix}" must be a normalised path like /orders (no trailing slash, no ":", "*", "%", "?" or dot segments)`,
      );
    }
    if (prefix.length > 1 && prefix.endsWith('/')) return problem(`prefix "${prefix}" must not end with "/"`);

    const url = parseHttpUrl(target, 'http://orders:3000');
    if (typeof url === 'string') return problem(`upstream ${url}`);
    if (url.pathname !== '/' || url.search || url.hash || url.username || url.password) {
      return problem(
        `upstream must be an origin like http://orders:3000 (no path, query or credentials: the request path is forwarded as is) ${got(target)}`,
      );
    }
    if (upstreams.some((u) => u.host === host && u.prefix === prefix)) {
      return problem(
        host === undefined
          ? `prefix "${prefix}" appears twice`
          : `host "${host}" with prefix "${prefix}" appears twice`,
      );
    }
    upstreams.push({
      ...(host !== undefined && { host }),
      prefix,
      origin: url.origin,
      ...(preserveHost && { preserveHost: true as const }),
    });
  }
  if (upstreams.length === 0) return 'must hold at least one prefix=url entry';
  upstreams.sort((a, b) => {
    if (a.host !== b.host) {
      if (a.host === undefined) return 1;
      if (b.host === undefined) return -1;
      return a.host < b.host ? -1 : 1;
    }
    return b.prefix.length - a.prefix.length;
  });
  return upstreams;
}

/**
 * The host part of an UPSTREAMS entry, normalised by the same `normalizeHost` that reads request hosts
 * (lower case, port and one trailing dot removed), so an entry and the requests for it always agree.
 */
export function parseUpstreamHost(raw: string): Parsed<string> {
  const normalized = normalizeHost(raw);
  if (!normalized.ok || normalized.host === '') {
    return {
      problem: `host must be a host name like api.example.com, a dotted-quad IPv4 address or a bracketed IPv6 address like [::1], optionally with a port ${got(raw)}`,
    };
  }
  return { value: normalized.host };
}

function parseTrustProxy(raw: string): Parsed<TrustProxySetting> {
  const lower = raw.toLowerCase();
  if (lower === 'false') return { value: false };
  if (lower === 'true') return { value: true };
  if (/^[0-9]+$/.test(raw)) {
    const hops = Number(raw);
    if (hops > 100) return { problem: `must be a hop count from 0 to 100 ${got(raw)}` };
    return { value: hops === 0 ? false : hops };
  }
  const entries = raw
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  for (const entry of entries) {
    if (!isTrustedProxyEntry(entry)) {
      return {
        problem: `must be true, false, a hop count, or a list of IP addresses, CIDRs (10.0.0.0/8) and loopback, linklocal, uniquelocal ${got(entry)}`,
      };
    }
  }
  return { value: entries };
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

/** Whether the proxy `hop` steps from the gateway (0: the socket peer) at `address` is believed. */
export type TrustFunction = (address: string, hop: number) => boolean;

/**
 * TRUST_PROXY as one function (false: nobody is trusted), compiled once: Fastify's `trustProxy` takes
 * it, so the client address Fastify reads (`request.ip`, `request.ips`) and the forwarding headers and
 * request ids the gateway passes on (http/forwarding.ts, http/request-id.ts) trust the same hops.
 */
export function fastifyTrustProxy(setting: TrustProxySetting): TrustFunction | false {
  if (setting === false) return false;
  if (setting === true) return () => true;
  // Fastify 5.12 treats a bare number as "trust nobody"; the documented meaning (as in Express and
  // proxy-addr) is "trust the n hops nearest to us", which this function says explicitly.
  if (typeof setting === 'number') return (_address: string, hop: number) => hop < setting;
  return proxyAddr.compile([...setting]);
}
