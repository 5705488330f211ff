/**
 * Explain ≡ gateway (SPEC §7): over a thousand random requests — methods (some misspelt), hosts in odd
 * spellings (`api.example.com..`, upper case, ports, IPv6, spaces, userinfo, a second Host line),
 * header values with spaces, tabs and repeats, client IPs of both families, paths from the bypass
 * corpus and raw UTF-8 — go to a real gateway over raw sockets and, as JSON, to the rules API's
 * `POST /rules/explain`. Every request must get the same rule from both, or the same 400; and every
 * client key explain names must be the one the gateway counted the request under (read back through
 * the gateway's `/usage`).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BYPASS_CORPUS } from './helpers/bypass-corpus.js';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { RawConnection } from './helpers/raw-connection.js';
import { READ_TOKEN, type RuleBodyV2, type RulesApi, startRulesApi } from './helpers/rules-api.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

/** Big enough that no request is ever denied: every answer names its rule in RateLimit-Policy. */
const CAPACITY = 1_000_000;
const limit = { capacity: CAPACITY, refill: 1, period: '1d' };
const limits = [{ name: 'l', ...limit }];

const RULES: Array<RuleBodyV2 & { match: { caseInsensitive?: boolean } }> = [
  { name: 'admin', match: { path: '/admin/**' }, limits },
  { name: 'admin-writes', match: { path: '/admin/**', methods: ['POST', 'PUT', 'DELETE'] }, limits },
  { name: 'api', match: { path: '/api/**' }, limits },
  { name: 'api-free', match: { path: '/api/**', headers: { 'x-tier': 'free' } }, limits, priority: 1 },
  { name: 'api-pro', match: { path: '/api/**', headers: { 'x-tier': 'pro' } }, limits, priority: 1 },
  {
    name: 'api-partners',
    match: { path: '/api/**', clientIps: ['10.0.0.0/8', '2001:db8::/32'] },
    limits,
    priority: 2,
  },
  { name: 'reports', match: { path: '/reports/*', notClientIps: ['192.168.0.0/16'] }, limits },
  { name: 'reports-any-case', match: { path: '/reports/**', caseInsensitive: true }, limits },
  { name: 'host-any', match: { path: '/h/**' }, limits },
  { name: 'host-api', match: { path: '/h/**', host: 'api.example.com' }, limits },
  { name: 'host-v6', match: { path: '/h/**', host: '[2001:db8::1]' }, limits },
  { name: 'items-get', match: { path: '/items/*', methods: ['GET'] }, limits },
  { name: 'items', match: { path: '/items/**' }, limits },
  {
    name: 'keyed',
    match: { path: '/k/**' },
    limits: [{ name: 'l', client: { by: 'header', name: 'x-api-key' }, ...limit }],
  },
  {
    name: 'cookies',
    match: { path: '/c/**' },
    limits: [{ name: 'l', client: { by: 'header', name: 'cookie' }, ...limit }],
  },
  {
    name: 'agents',
    match: { path: '/ua/**' },
    limits: [{ name: 'l', client: { by: 'header', name: 'user-agent' }, ...limit }],
  },
  { name: 'secret', match: { path: '/secret/**' }, limits },
  { name: 'cafe', match: { path: '/café/**' }, limits },
  { name: 'old', match: { path: '/items/**' }, limits, enabled: false, priority: 9 },
];

const METHODS = ['GET', 'GET', 'GET', 'GET', 'HEAD', 'POST', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
/** Methods Node's parser refuses (methods are case-sensitive) */
const BAD_METHODS = ['get', 'Post', 'FOO'];

/** Host spellings a gateway reads (odd but valid) … */
const HOSTS = [
  'api.example.com',
  'API.Example.COM',
  'api.example.com.',
  'api.example.com:8080',
  'api.example.com.:443',
  'api.example.com:',
  ' api.example.com',
  'api.example.com\t',
  '[2001:db8::1]',
  '[2001:DB8::1]:8443',
  '127.0.0.1',
  'other.example',
  '',
];
/** … and ones it refuses (400 HOST_…). */
const BAD_HOSTS = [
  'api.example.com..',
  'api. example.com',
  'api.example.com:99999',
  'user@api.example.com',
  '[2001:db8::1',
  '[fe80::1%25eth0]',
  '127.1',
  'exämple.com',
];

/** Paths of their own beside the bypass corpus: every rule above, raw UTF-8, zero-width and fullwidth letters. */
const PATHS = [
  '/',
  '/api/x',
  '/api/x/y?q=1',
  '/api/../admin/x',
  '/API/x',
  '/reports/q1',
  '/REPORTS/q1/x',
  '/Reports/Q1',
  '/h/x',
  '/items/1',
  '/items/1/2',
  '/k/x',
  '/c/x',
  '/ua/x',
  '/secret/x',
  '/ｓecret/x',
  '/%EF%BD%93ecret/x',
  '/se%E2%80%8Bcret/x',
  '/se\u200bcret/x',
  '/café/a',
  '/caf%C3%A9/a',
  '/cafe%CC%81/a',
  '/%E2%80%8B/x',
  '/a/..b',
  '/api/x/.%E2%80%8B/y',
  '/a b',
  '/a\tb',
];

/** The bypass corpus without NUL: the rules API refuses NUL anywhere in a JSON body (400), so explain is never asked. */
const CORPUS_TARGETS = BYPASS_CORPUS.map(([target]) => target).filter((target) => !target.includes('\0'));

/** Header values: spaces and tabs around and inside, empty, non-ASCII, one with a control character. */
const TIERS = ['free', 'pro', ' free', 'free ', '\tfree', 'pro\t', ' \t pro \t', 'fr ee', 'FREE', '', 'frée'];
const KEYS = ['k1', ' k1', 'k1\t', 'k 1', 'a=1', 'b=2', 'ключ', 'x'.repeat(300)];
const IPS = [
  '203.0.113.7',
  '10.1.2.3',
  '192.168.1.1',
  '2001:db8::1',
  '2001:db8:1:2::9',
  'fe80::1',
  '::ffff:10.0.0.1',
];

interface RandomRequest {
  method: string;
  host: string;
  /** a second Host line (the gateway refuses two) */
  secondHost: string | undefined;
  path: string;
  /** header name → its lines, in order */
  headers: Record<string, string[]>;
  clientIp: string;
}

/** 0 to 2 lines of a header (none: absent). */
const lines = (values: readonly string[]) => fc.array(fc.constantFrom(...values), { maxLength: 2 });

const requestArbitrary: fc.Arbitrary<RandomRequest> = fc
  .record({
    method: fc.oneof({ weight: 10, arbitrary: fc.constantFrom(...METHODS) }, fc.constantFrom(...BAD_METHODS)),
    host: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...HOSTS) }, fc.constantFrom(...BAD_HOSTS)),
    secondHost: fc.oneof(
      { weight: 15, arbitrary: fc.constant(undefined) },
      fc.constantFrom(...HOSTS, ...BAD_HOSTS),
    ),
    path: fc.oneof(
      { weight: 2, arbitrary: fc.constantFrom(...PATHS) },
      fc.constantFrom(...CORPUS_TARGETS),
      fc
        .tuple(fc.constantFrom('/api', '/k', '/h', '/reports', '/c'), fc.constantFrom(...CORPUS_TARGETS))
        .map(([prefix, target]) => (target.startsWith('/') ? `${prefix}${target}` : target)),
    ),
    tier: lines(TIERS),
    apiKey: fc.oneof({ weight: 8, arbitrary: lines(KEYS) }, fc.constant(['k\x7f1'])),
    cookie: lines(['a=1', 'b=2', ' c=3 ']),
    agent: lines(['curl/8', 'bot 1']),
    clientIp: fc.constantFrom(...IPS),
  })
  .map(({ tier, apiKey, cookie, agent, ...rest }) => ({
    ...rest,
    headers: Object.fromEntries(
      (
        [
          ['x-tier', tier],
          ['x-api-key', apiKey],
          ['cookie', cookie],
          ['user-agent', agent],
        ] as const
      ).filter(([, values]) => values.length > 0),
    ),
  }));

/** The request as bytes on the wire (UTF-8, so a raw `é` is the two bytes a client sends). */
function wireRequest(request: RandomRequest): Buffer {
  let head = `${request.method} ${request.path} HTTP/1.1\r\nHost: ${request.host}\r\n`;
  if (request.secondHost !== undefined) head += `Host: ${request.secondHost}\r\n`;
  for (const [name, values] of Object.entries(request.headers)) {
    for (const value of values) head += `${name}: ${value}\r\n`;
  }
  head += `X-Forwarded-For: ${request.clientIp}\r\n\r\n`;
  return Buffer.from(head, 'utf8');
}

/** The same request as explain's JSON body. */
function explainBody(request: RandomRequest) {
  const headers: Record<string, string | string[]> = { ...request.headers };
  if (request.secondHost !== undefined) headers.host = request.secondHost;
  headers['x-forwarded-for'] = request.clientIp;
  return {
    method: request.method,
    host: request.host,
    path: request.path,
    headers,
    clientIp: request.clientIp,
  };
}

interface Explanation {
  error: null | { statusCode: number; code: string; message: string };
  rule: null | { name: string };
  limits: Array<{ name: string; clientKey: string }>;
  considered: Array<{ name: string; matched: boolean; reason: string }>;
}

/**
 * SPEC §7: `considered` names the rules whose path fits but whose method or host does not, with that
 * reason: the rules a confused admin asks about.
 */
function missingFromConsidered(said: Explanation, method: string): string | undefined {
  const find = (name: string) => said.considered.find((c) => c.name === name);
  if (said.rule?.name === 'host-any' && !/^host is /.test(find('host-api')?.reason ?? '')) {
    return 'host-api (host)';
  }
  if (said.rule?.name === 'admin' && !['POST', 'PUT', 'DELETE'].includes(method)) {
    if (!/^method \S+ is not one of POST, PUT, DELETE$/.test(find('admin-writes')?.reason ?? '')) {
      return 'admin-writes (method)';
    }
  }
  if (said.rule?.name === 'items' && find('old')?.reason !== 'rule is disabled') return 'old (disabled)';
  return undefined;
}

/** What a gateway answer says: its status, the code of a 400 and the rule named by RateLimit-Policy. */
function gatewayView(answer: { status: number; headers: Record<string, string>; body: string }) {
  const policy = answer.headers['ratelimit-policy'];
  const item = policy === undefined ? undefined : /^"([^".]*)/.exec(policy)?.[1];
  let code: string | undefined;
  // a 400 to HEAD has no body to read its code from
  if (answer.status === 400 && answer.body !== '') {
    const body = JSON.parse(answer.body) as { code: string; reason?: string };
    code = body.reason ?? body.code;
  }
  return { status: answer.status, code, rule: item ?? null };
}

/** Codes explain gives for what Node's HTTP parser refuses before the gateway sees a request. */
const PARSER_CODES = ['METHOD_INVALID', 'TARGET_INVALID', 'HEADER_INVALID'];

let api: RulesApi;
let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  [api, upstream] = await Promise.all([startRulesApi(), startUpstream()]);
  for (const rule of RULES) await api.createRule(rule);
  gw = await startGateway({
    UPSTREAMS: `/=${upstream.url}`,
    RULES_API_URL: api.url,
    RULES_API_TOKEN: READ_TOKEN,
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_KEY_PREFIX: uniqueKeyPrefix('explain-agreement'),
    TRUST_PROXY: 'true',
    // a busy machine must not send a decision to the local fallback: the counts in Redis are checked
    STORE_TIMEOUT_MS: '2000',
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([api?.close(), upstream?.close()]);
});

async function explain(body: ReturnType<typeof explainBody>): Promise<Explanation> {
  const response = await fetch(`${api.url}/rules/explain`, {
    method: 'POST',
    headers: { authorization: `Bearer ${READ_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.status !== 200)
    throw new Error(`explain ${response.status} ${await response.text()} for ${JSON.stringify(body)}`);
  return (await response.json()) as Explanation;
}

/** Runs `work` over `items` with `width` workers, keeping the results in order. */
async function inParallel<T, R>(
  items: readonly T[],
  width: number,
  work: (item: T, worker: number) => Promise<R>,
) {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async (_, worker) => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index]!, worker);
      }
    }),
  );
  return results;
}

describe('explain agrees with the gateway', () => {
  it('names the same rule, or the same 400, for 1,200 random requests, and the client keys the gateway counted', async () => {
    const seed = Number(process.env.EXPLAIN_AGREEMENT_SEED ?? Date.now() % 1_000_000);
    const requests = fc.sample(requestArbitrary, { numRuns: 1_200, seed });
    const explained = await inParallel(requests, 8, (request) => explain(explainBody(request)));
    const connections = Array.from({ length: 4 }, () => new RawConnection(gw.port));
    const answers = await inParallel(requests, connections.length, (request, worker) =>
      connections[worker]!.send(wireRequest(request), request.method),
    );
    for (const connection of connections) connection.close();

    const disagreements: string[] = [];
    const counted = new Map<string, number>(); // `rule\0clientKey` → requests explain says it counts
    requests.forEach((request, i) => {
      const said = explained[i]!;
      const got = gatewayView(answers[i]!);
      const expected =
        said.error !== null ? { status: 400, rule: null } : { status: 200, rule: said.rule?.name ?? null };
      const sameCode =
        said.error === null ||
        got.code === undefined ||
        (got.code === 'SLUICE_BAD_REQUEST'
          ? PARSER_CODES.includes(said.error.code)
          : got.code === said.error.code);
      if (got.status !== expected.status || got.rule !== expected.rule || !sameCode) {
        disagreements.push(
          `${JSON.stringify(wireRequest(request).toString('utf8'))}: explain ${JSON.stringify(
            said.error?.code ?? said.rule?.name ?? null,
          )}, gateway ${got.status} ${JSON.stringify(got.code ?? got.rule)}`,
        );
      }
      const missing = said.error === null ? missingFromConsidered(said, request.method) : undefined;
      if (missing !== undefined)
        disagreements.push(`explain's considered lacks ${missing}: ${JSON.stringify(said)}`);
      if (said.error === null && said.rule !== null) {
        const key = `${said.rule.name}\0${said.limits[0]!.clientKey}`;
        counted.set(key, (counted.get(key) ?? 0) + 1);
      }
    });
    expect(disagreements, `seed ${seed}`).toEqual([]);
    // most requests get as far as a rule; the others are 400s of every kind
    expect(requests.filter((_, i) => explained[i]!.error === null).length).toBeGreaterThan(350);
    expect(new Set(explained.map((e) => e.rule?.name)).size).toBeGreaterThanOrEqual(12);

    // the client key explain names is the one the gateway counted each request under
    const wrongKeys: string[] = [];
    await inParallel([...counted], 4, async ([key, requestsCounted]) => {
      const [rule, client] = key.split('\0') as [string, string];
      const url = `${gw.adminUrl}/usage?rule=${encodeURIComponent(rule)}&client=${encodeURIComponent(client)}`;
      let body: { limits?: Array<{ remaining: number }> } = {};
      // a 503 is a store read that took too long on a busy machine: ask again
      for (let attempt = 0; attempt < 5; attempt++) {
        const usage = await fetch(url);
        body = (await usage.json()) as typeof body;
        if (usage.status !== 503) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const remaining = body.limits?.[0]?.remaining;
      if (remaining !== CAPACITY - requestsCounted) {
        wrongKeys.push(
          `${rule} ${JSON.stringify(client)}: ${requestsCounted} explained, usage says ${JSON.stringify(body)}`,
        );
      }
    });
    expect(wrongKeys, `seed ${seed}`).toEqual([]);
  }, 120_000);
});
