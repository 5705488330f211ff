/**
 * The decision headers as users' tools read them: every variant Sluice sends (single, stacked, sliding
 * window, concurrency, lease, shadow, fractional) parsed with `structured-headers` (RFC 9651) and
 * checked against draft-ietf-httpapi-ratelimit-headers-11's types, and a retrying client (`ky`) that
 * honours Retry-After against a real 429. A gateway with its rules given in code, on the real Redis.
 */

import { StaticRules } from '@sluice/engine';
import { type RuleInput, storedRule } from '@sluice/shared';
import ky from 'ky';
import { type Item, parseList } from 'structured-headers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway, uniqueKeyPrefix } from './helpers/gateway.js';
import { type HttpResponse, http } from './helpers/http.js';
import { startUpstream, type Upstream } from './helpers/upstream.js';

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;

const byKey = { by: 'header' as const, name: 'x-api-key' };
const RULES: RuleInput[] = [
  { name: 'single', match: { path: '/single/**' }, limit: { capacity: 3, refill: 1, period: '1s' } },
  {
    name: 'stacked',
    match: { path: '/stacked/**' },
    limits: [
      { name: 'burst', client: byKey, capacity: 2, refill: 1, period: '1s' },
      { name: 'daily', client: byKey, algorithm: 'sliding-window', max: 100, window: '1d' },
      { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1, period: '1h' },
    ],
  },
  {
    name: 'window',
    match: { path: '/window/**' },
    limits: [{ name: 'hourly', algorithm: 'sliding-window', max: 3, window: '1h' }],
  },
  {
    name: 'inflight',
    match: { path: '/slow/**' },
    limits: [{ name: 'slots', algorithm: 'concurrency', max: 2 }],
  },
  {
    name: 'leased',
    match: { path: '/lease/**' },
    limit: { capacity: 40, refill: 20, period: '1s' },
    maxDebt: 0,
    mode: 'lease',
  },
  {
    name: 'dry-run',
    shadow: true,
    match: { path: '/shadow/**' },
    limit: { capacity: 1, refill: 1, period: '1h' },
  },
  {
    name: 'fractional',
    match: { path: '/frac/**' },
    limits: [
      { name: 'tokens', capacity: 2.5, refill: 0.5, period: '1s', maxDebt: 0 },
      { name: 'window', algorithm: 'sliding-window', max: 1.5, window: '1m' },
    ],
    cost: 0.5,
  },
  // two tokens, one back every 2 s: after both, "until full" would be 4 s, Retry-After is 2
  {
    name: 'retry',
    match: { path: '/retry/**' },
    limit: { capacity: 2, refill: 1, period: '2s' },
    maxDebt: 0,
  },
];

let upstream: Upstream;
let gw: RunningGateway;

beforeAll(async () => {
  upstream = await startUpstream();
  gw = await startGateway(
    {
      UPSTREAMS: `/=${upstream.url}`,
      RULES_API_URL: 'http://127.0.0.1:9',
      REDIS_URL: 'redis://127.0.0.1:6379',
      REDIS_KEY_PREFIX: uniqueKeyPrefix('draft11'),
      LEASE_MS: '100',
    },
    { rules: new StaticRules(RULES.map(rule)) },
  );
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

/** One item of RateLimit-Policy and its RateLimit item, as draft-11 types them. */
interface Draft11Item {
  name: string;
  q: number;
  w: number | undefined;
  qu: string | undefined;
  r: number;
  t: number;
  pk: Uint8Array | undefined;
}

const POLICY_PARAMETERS = new Set(['q', 'qu', 'w', 'pk']);
const RATELIMIT_PARAMETERS = new Set(['r', 't', 'pk']);

/** An sf-integer (RFC 9651 §3.3.1): a JS integer, and written without a decimal point. */
function expectInteger(value: unknown, raw: string, key: string): number {
  expect(typeof value, `${key} in ${raw}`).toBe('number');
  expect(Number.isInteger(value), `${key} is an Integer in ${raw}`).toBe(true);
  expect(value as number).toBeGreaterThanOrEqual(0);
  return value as number;
}

/** Parses both headers of an answer with `structured-headers` and checks every draft-11 type. */
function draft11(answer: HttpResponse): Draft11Item[] {
  const policyRaw = String(answer.headers['ratelimit-policy']);
  const rateLimitRaw = String(answer.headers.ratelimit);
  // Decimals parse to JS numbers too: the raw text must have no `.` in a number
  expect(policyRaw).not.toMatch(/[qw]=-?\d+\./);
  expect(rateLimitRaw).not.toMatch(/[rt]=-?\d+\./);
  const policy = parseList(policyRaw);
  const rateLimit = parseList(rateLimitRaw);
  expect(rateLimit.length).toBe(policy.length);
  return policy.map((member, i) => {
    // Items, not Inner Lists, whose value is a String (the policy name)
    expect(Array.isArray(member[0])).toBe(false);
    const [name, policyParameters] = member as Item;
    expect(typeof name).toBe('string');
    for (const key of policyParameters.keys()) expect(POLICY_PARAMETERS).toContain(key);
    const q = expectInteger(policyParameters.get('q'), policyRaw, 'q');
    const w = policyParameters.has('w')
      ? expectInteger(policyParameters.get('w'), policyRaw, 'w')
      : undefined;
    if (w !== undefined) expect(w).toBeGreaterThanOrEqual(1);
    const qu = policyParameters.get('qu');
    if (qu !== undefined) expect(typeof qu).toBe('string');

    const [itemName, parameters] = rateLimit[i] as Item;
    expect(itemName).toBe(name);
    for (const key of parameters.keys()) expect(RATELIMIT_PARAMETERS).toContain(key);
    const r = expectInteger(parameters.get('r'), rateLimitRaw, 'r');
    const t = expectInteger(parameters.get('t'), rateLimitRaw, 't');
    const pk = parameters.get('pk');
    // a Byte Sequence (structured-headers gives an ArrayBuffer)
    if (pk !== undefined) expect(pk).toBeInstanceOf(ArrayBuffer);
    return {
      name: name as string,
      q,
      w,
      qu: qu as string | undefined,
      r,
      t,
      pk: pk === undefined ? undefined : new Uint8Array(pk as ArrayBuffer),
    };
  });
}

/** On a 429: the denying item has nothing left and its `t` never exceeds Retry-After. */
function expectDenial(answer: HttpResponse, denying: string): Draft11Item[] {
  expect(answer.status).toBe(429);
  const retryAfter = Number(answer.headers['retry-after']);
  expect(Number.isInteger(retryAfter) && retryAfter >= 1).toBe(true);
  const items = draft11(answer);
  const item = items.find((candidate) => candidate.name === denying)!;
  expect(item.r).toBe(0);
  // the body: draft-11's quota-exceeded problem (RFC 9457), naming policies as RateLimit-Policy does
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json;/);
  const problem = answer.json();
  expect(problem).toMatchObject({
    type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
    title: expect.any(String),
    status: 429,
    detail: expect.any(String),
    code: 'SLUICE_RATE_LIMITED',
    retryAfter: retryAfter,
    requestId: answer.headers['x-request-id'],
  });
  const violated = problem['violated-policies'] as string[];
  expect(violated[0]).toBe(denying);
  for (const name of violated) expect(items.map((candidate) => candidate.name)).toContain(name);
  expect(item.t).toBeGreaterThanOrEqual(1);
  expect(item.t).toBeLessThanOrEqual(retryAfter);
  return items;
}

describe('every variant of the decision headers parses as draft-11 says', () => {
  it('single limit: Integers throughout, a pk, and on the 429 t = Retry-After', async () => {
    const answers: HttpResponse[] = [];
    for (let i = 0; i < 4; i++) answers.push(await http(gw.port, '/single/x'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    const admitted = answers.slice(0, 3).map((a) => draft11(a)[0]!);
    expect(admitted.map(({ name, q, w, r }) => ({ name, q, w, r }))).toEqual([
      { name: 'single', q: 3, w: 3, r: 2 },
      { name: 'single', q: 3, w: 3, r: 1 },
      { name: 'single', q: 3, w: 3, r: 0 },
    ]);
    // draft-11's t: one more token in at most a second, never "until full" (3 s)
    for (const item of admitted) expect(item.t).toBe(1);
    const [denied] = expectDenial(answers[3]!, 'single');
    expect(denied!.t).toBe(Number(answers[3]!.headers['retry-after']));
    expect(denied!.pk?.byteLength).toBe(12);
  });

  it('stacked limits: one item per limit in order, the per-key ones with the same pk, the global one without', async () => {
    const alice = { headers: { 'x-api-key': 'alice-secret-key' } };
    const answers: HttpResponse[] = [];
    for (let i = 0; i < 3; i++) answers.push(await http(gw.port, '/stacked/x', alice));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    const items = expectDenial(answers[2]!, 'stacked.burst');
    expect(items.map(({ name, q, w, r }) => ({ name, q, w, r }))).toEqual([
      { name: 'stacked.burst', q: 2, w: 2, r: 0 },
      { name: 'stacked.daily', q: 100, w: 86_400, r: 98 },
      { name: 'stacked.everyone', q: 1000, w: 3_600_000, r: 998 },
    ]);
    const [burst, daily, everyone] = items;
    expect(burst!.pk).toEqual(daily!.pk);
    expect(everyone!.pk).toBeUndefined();
    expect(Buffer.from(burst!.pk!).toString('latin1')).not.toContain('alice');
    // another key, another partition
    const bob = draft11(await http(gw.port, '/stacked/x', { headers: { 'x-api-key': 'bob' } }));
    expect(bob[0]!.pk).not.toEqual(burst!.pk);
  });

  it('sliding window: t until the estimate leaves room for one more, = Retry-After on the 429', async () => {
    const answers: HttpResponse[] = [];
    for (let i = 0; i < 4; i++)
      answers.push(await http(gw.port, '/window/x', { localAddress: '127.0.0.21' }));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    expect(answers.slice(0, 3).map((a) => draft11(a)[0]!.r)).toEqual([2, 1, 0]);
    const [denied] = expectDenial(answers[3]!, 'window.hourly');
    // never "until the estimate is 0" (the end of the next window, 40 minutes later than this)
    expect(Math.abs(denied!.t - Number(answers[3]!.headers['retry-after']))).toBeLessThanOrEqual(1);
  });

  it('concurrency: qu="concurrent-requests", no w; t=0 while a slot is free, t=1 when none is', async () => {
    const from = { localAddress: '127.0.0.22' };
    const answers = await Promise.all([
      http(gw.port, '/slow/a?ms=600', from),
      http(gw.port, '/slow/b?ms=600', from),
      new Promise<HttpResponse>((resolve) => setTimeout(() => resolve(http(gw.port, '/slow/c', from)), 200)),
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    const admitted = answers.slice(0, 2).map((a) => draft11(a)[0]!);
    expect(admitted.map(({ r, t }) => ({ r, t })).sort((x, y) => y.r - x.r)).toEqual([
      { r: 1, t: 0 },
      { r: 0, t: 1 },
    ]);
    expect(admitted[0]).toMatchObject({
      name: 'inflight.slots',
      q: 2,
      w: undefined,
      qu: 'concurrent-requests',
    });
    expect(expectDenial(answers[2]!, 'inflight.slots')[0]!.t).toBe(1);
  });

  it('lease mode: r from the bucket the lease came from, t from the same balance (one more token: 1 s at most)', async () => {
    const from = { localAddress: '127.0.0.23' };
    const items: Draft11Item[] = [];
    for (let i = 0; i < 30; i++) {
      const answer = await http(gw.port, '/lease/x', from);
      expect(answer.status).toBe(200);
      items.push(draft11(answer)[0]!);
    }
    for (const item of items) {
      expect(item).toMatchObject({ name: 'leased', q: 40, w: 2 });
      expect(item.r).toBeLessThan(40);
      // more than "until full" of a balance under 20 would be 2 s or more
      expect(item.t).toBe(1);
    }
  });

  it('a shadow rule sends no RateLimit headers at all, also when it would deny', async () => {
    const answers: HttpResponse[] = [];
    for (let i = 0; i < 3; i++) answers.push(await http(gw.port, '/shadow/x'));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    for (const answer of answers) {
      expect(answer.headers.ratelimit).toBeUndefined();
      expect(answer.headers['ratelimit-policy']).toBeUndefined();
      expect(answer.headers['retry-after']).toBeUndefined();
    }
    // an upstream's own RateLimit headers reach the client as if no rule applied
    const own = await http(
      gw.port,
      '/shadow/x?set=ratelimit:"upstream";r=5;t=1&set=ratelimit-policy:"upstream";q=9',
    );
    expect(own.status).toBe(200);
    expect(own.headers.ratelimit).toBe('"upstream";r=5;t=1');
    expect(own.headers['ratelimit-policy']).toBe('"upstream";q=9');
  });

  it('fractional capacities and costs: q rounded down to an Integer, r and t whole', async () => {
    const from = { localAddress: '127.0.0.24' };
    const answers: HttpResponse[] = [];
    for (let i = 0; i < 4; i++) answers.push(await http(gw.port, '/frac/x', from));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    const first = draft11(answers[0]!);
    expect(first.map(({ name, q, w, r }) => ({ name, q, w, r }))).toEqual([
      // 2.5 − 0.5 = 2 tokens; 1.5 − 0.5 = 1 unit
      { name: 'fractional.tokens', q: 2, w: 5, r: 2 },
      { name: 'fractional.window', q: 1, w: 60, r: 1 },
    ]);
    expectDenial(answers[3]!, 'fractional.window');
  });
});

describe('a retrying client (ky) against a real 429', () => {
  it('retries when Retry-After says, which is no earlier than t, and is admitted', async () => {
    const url = `${gw.url}/retry/x`;
    // ky runs on fetch, from 127.0.0.1: that address's two tokens go first
    expect((await http(gw.port, '/retry/x')).status).toBe(200);
    expect((await http(gw.port, '/retry/x')).status).toBe(200);
    const seen: { atMs: number; status: number; retryAfter: number; t: number }[] = [];
    const tOf = (header: string | null) => Number(/;t=(\d+)/.exec(header ?? '')?.[1]);
    const response = await ky.get(url, {
      retry: { limit: 2, statusCodes: [429], afterStatusCodes: [429] },
      timeout: 15_000,
      hooks: {
        afterResponse: [
          (_request, _options, answer) => {
            seen.push({
              atMs: performance.now(),
              status: answer.status,
              retryAfter: Number(answer.headers.get('retry-after')),
              t: tOf(answer.headers.get('ratelimit')),
            });
          },
        ],
      },
    });
    expect(response.status).toBe(200);
    expect(seen.map((s) => s.status)).toEqual([429, 200]);
    const [denied, admitted] = seen;
    // the bucket is empty, one token back every 2 s: Retry-After 2, and t the same (never 4, "until full")
    expect(denied!.retryAfter).toBe(2);
    expect(denied!.t).toBeLessThanOrEqual(denied!.retryAfter);
    expect(denied!.t).toBe(2);
    // ky waited what Retry-After said (the answer lands after it), not less
    expect(admitted!.atMs - denied!.atMs).toBeGreaterThanOrEqual(denied!.retryAfter * 1_000 - 50);
  });

  it('a retry before t has passed is still refused', async () => {
    const from = { localAddress: '127.0.0.26' };
    await http(gw.port, '/retry/x', from);
    await http(gw.port, '/retry/x', from);
    const denied = await http(gw.port, '/retry/x', from);
    const t = Number(/;t=(\d+)/.exec(String(denied.headers.ratelimit))![1]);
    expect(t).toBe(2);
    expect((await http(gw.port, '/retry/x', from)).status).toBe(429);
  });
});
