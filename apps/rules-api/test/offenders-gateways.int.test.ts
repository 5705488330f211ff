/**
 * `GET /rules/{id}/offenders` with ANALYTICS_GATEWAYS and no Redis (what the embedded demo runs): a
 * real rules API on Postgres, over HTTP, asks each listed gateway admin's `GET /offenders` and sums
 * them; a gateway that refuses or hangs is skipped; none answering is a 503. The gateways here are
 * small HTTP servers answering as a gateway's admin port does (apps/gateway/src/offenders/admin-route.ts).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort } from '@sluice/test-support';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Backend, createRule, postgresBackend, READ_TOKEN, ruleInput, startApp } from './support/app.js';

interface Item {
  client: string;
  limit: string;
  denied: number;
  shadow: boolean;
}

/** A gateway admin port that knows one rule by name and answers `items` for it. */
async function fakeGateway(ruleName: string, items: Item[]) {
  const asked: string[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://gateway');
    asked.push(`${url.pathname}${url.search}`);
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (url.pathname !== '/offenders') return json(404, { code: 'NOPE' });
    if (url.searchParams.get('rule') !== ruleName) {
      return json(404, { statusCode: 404, error: 'Not Found', code: 'SLUICE_RULE_NOT_FOUND', message: 'no' });
    }
    json(200, { rule: ruleName, minutes: Number(url.searchParams.get('minutes')), items });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, asked };
}

/** Accepts connections and never answers. */
async function hangingGateway() {
  const server = createServer(() => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const servers: Server[] = [];
const apps: FastifyInstance[] = [];
let backend: Backend;

/** A rules API listening on a free port, asking `gateways`; resolves its base URL and a rule named `name`. */
async function rulesApiAsking(gateways: string[], name: string) {
  const app = await startApp(backend, { ANALYTICS_GATEWAYS: gateways.join(',') });
  apps.push(app);
  const rule = await createRule(app, ruleInput({ name }));
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  return { base, id: rule.id as string };
}

async function offenders(base: string, id: string, query = '') {
  const res = await fetch(`${base}/rules/${id}/offenders${query}`, {
    headers: { authorization: `Bearer ${READ_TOKEN}` },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

beforeAll(async () => {
  backend = await postgresBackend();
});
afterAll(async () => {
  for (const app of apps) await app.close();
  for (const server of servers) server.closeAllConnections();
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  await backend?.cleanup();
});

describe('GET /rules/{id}/offenders with ANALYTICS_GATEWAYS and no Redis', () => {
  it('sums what every gateway saw by (client, limit, shadow), most denied first, asking by rule name', async () => {
    const a = await fakeGateway('orders', [
      { client: 'header:mallory', limit: 'burst', denied: 7, shadow: false },
      { client: 'ip:203.0.113.7', limit: 'burst', denied: 3, shadow: false },
      { client: 'header:mallory', limit: 'burst', denied: 2, shadow: true },
    ]);
    const b = await fakeGateway('orders', [
      { client: 'ip:203.0.113.7', limit: 'burst', denied: 6, shadow: false },
      { client: 'header:mallory', limit: 'burst', denied: 1, shadow: false },
      { client: 'header:mallory', limit: 'daily', denied: 4, shadow: false },
    ]);
    // knows no rule "orders" (say, not refreshed yet): it saw nothing under it, and still counts as answering
    const other = await fakeGateway('something-else', []);
    servers.push(a.server, b.server, other.server);
    const { base, id } = await rulesApiAsking([a.url, b.url, other.url], 'orders');

    const { status, body } = await offenders(base, id, '?minutes=5');
    expect(status).toBe(200);
    expect(body).toEqual({
      rule: id,
      minutes: 5,
      items: [
        { client: 'ip:203.0.113.7', limit: 'burst', denied: 9, shadow: false },
        { client: 'header:mallory', limit: 'burst', denied: 8, shadow: false },
        { client: 'header:mallory', limit: 'daily', denied: 4, shadow: false },
        { client: 'header:mallory', limit: 'burst', denied: 2, shadow: true },
      ],
    });
    expect(a.asked).toEqual(['/offenders?rule=orders&minutes=5']);
    expect(b.asked).toEqual(['/offenders?rule=orders&minutes=5']);
  });

  it('lists the top 20 of the sum', async () => {
    const many = (from: number) =>
      Array.from({ length: 15 }, (_, i) => ({
        client: `ip:198.51.100.${from + i}`,
        limit: '',
        denied: from + i,
        shadow: false,
      }));
    const a = await fakeGateway('top', many(1));
    const b = await fakeGateway('top', many(16));
    servers.push(a.server, b.server);
    const { base, id } = await rulesApiAsking([a.url, b.url], 'top');
    const { body } = await offenders(base, id);
    const items = body.items as Item[];
    expect(items).toHaveLength(20);
    expect(items[0]).toEqual({ client: 'ip:198.51.100.30', limit: '', denied: 30, shadow: false });
    expect(items[19]!.denied).toBe(11);
    expect(body.minutes).toBe(15);
  });

  it('skips a gateway that refuses the connection or does not answer, and answers from the others', async () => {
    const alive = await fakeGateway('skip', [{ client: 'global', limit: '', denied: 5, shadow: false }]);
    const hanging = await hangingGateway();
    servers.push(alive.server, hanging.server);
    const dead = `http://127.0.0.1:${await freePort()}`;
    const { base, id } = await rulesApiAsking([dead, alive.url, hanging.url], 'skip');
    const { status, body } = await offenders(base, id);
    expect(status).toBe(200);
    expect(body.items).toEqual([{ client: 'global', limit: '', denied: 5, shadow: false }]);
  });

  it('answers 503 SLUICE_ANALYTICS_UNAVAILABLE naming the gateways when none answers', async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const { base, id } = await rulesApiAsking([dead], 'none');
    const { status, body } = await offenders(base, id);
    expect(status).toBe(503);
    expect(body.code).toBe('SLUICE_ANALYTICS_UNAVAILABLE');
    expect(body.message).toContain('no gateway in ANALYTICS_GATEWAYS answered');
    expect(body.message).toContain(dead);
  });
});
