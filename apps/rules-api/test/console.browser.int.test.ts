/**
 * The console in a real browser: Debian's chromium (`apt-get install -y chromium`) driven by
 * playwright-core, against a real rules API process on a fresh Postgres database. axe-core, injected
 * into the page, checks each state for accessibility violations; at 360 and 390 px nothing spills
 * sideways. Screenshots go to a temporary directory, or to `CONSOLE_SCREENSHOTS_DIR` (docs/images to
 * refresh the docs).
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startRulesApi, type TestRulesApi } from '@sluice/test-support';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const AXE_SOURCE = readFile(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

let api: TestRulesApi;
let browser: Browser;
let page: Page;
let shots: string;
const pageErrors: string[] = [];
/** the messages of the page's dialogs (confirm, alert), all accepted unless `dismissDialogs` */
const dialogs: string[] = [];
let dismissDialogs = false;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  shots = process.env.CONSOLE_SCREENSHOTS_DIR ?? (await mkdtemp(path.join(tmpdir(), 'sluice-console-')));
  await mkdir(shots, { recursive: true });
  [api, browser] = await Promise.all([
    startRulesApi({ databasePrefix: 'sluice_console' }),
    chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] }),
  ]);
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  page = await context.newPage();
  page.setDefaultTimeout(10_000);
  // CSP violations and script errors show up here (answers 4xx are part of the test, not errors)
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text());
  });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void (dismissDialogs ? d.dismiss() : d.accept());
  });
}, 45_000);

afterAll(async () => {
  await browser?.close();
  await api?.stop();
});

/**
 * Runs axe-core (WCAG 2.x A and AA rules and best practices) on the page as it is now; fails with each
 * violation's rule and the elements it names. Injected through the DevTools protocol, which the page's
 * CSP does not govern, so the CSP under test stays as served.
 */
async function expectNoAxeViolations(state: string) {
  if (!(await page.evaluate('typeof window.axe !== "undefined"'))) await page.evaluate(await AXE_SOURCE);
  const violations = (await page.evaluate(`axe
    .run(document, { resultTypes: ['violations'] })
    .then((r) => r.violations.map((v) => v.id + ': ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))`)) as string[];
  expect(violations, `axe violations, ${state}`).toEqual([]);
}

/** Fails when the page is wider than the viewport (a sideways scroll bar), naming the widest culprits. */
async function expectNoSidewaysSpill(width: number, state: string) {
  await page.setViewportSize({ width, height: 800 });
  const spill = (await page.evaluate(`(() => {
    const viewport = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth <= viewport) return [];
    return [...document.querySelectorAll('body *')]
      .filter((e) => e.getBoundingClientRect().right > viewport + 0.5 && e.getClientRects().length > 0)
      .slice(0, 5)
      .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' right=' + Math.round(e.getBoundingClientRect().right));
  })()`)) as string[];
  expect(spill, `${state} at ${width} px: elements beyond the viewport`).toEqual([]);
}

/** A call behind the page's back, with the admin token. */
async function adminCall(method: string, url: string, body?: unknown, ifMatch?: number) {
  const res = await fetch(`${api.url}${url}`, {
    method,
    headers: {
      authorization: `Bearer ${api.adminToken}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(ifMatch === undefined ? {} : { 'if-match': `"${ifMatch}"` }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked by the assertions
  const json: any = res.status === 204 ? undefined : await res.json();
  return { status: res.status, body: json };
}

const STACKED = {
  name: 'search',
  description: 'search API: burst, daily and in flight per key, and a cap for everyone',
  match: { path: '/search/**', methods: ['GET'] },
  limits: [
    { name: 'burst', client: { by: 'header', name: 'x-api-key' }, capacity: 20, refill: 10, period: '1s' },
    {
      name: 'daily',
      client: { by: 'header', name: 'x-api-key' },
      algorithm: 'sliding-window',
      max: 10000,
      window: '1d',
    },
    { name: 'everyone', client: { by: 'global' }, capacity: 1000, refill: 1000, period: '1s' },
    { name: 'inflight', client: { by: 'header', name: 'x-api-key' }, algorithm: 'concurrency', max: 5 },
  ],
};

describe('the console in Chromium', () => {
  it('serves the page with a strict CSP and no inline script', async () => {
    const res = await fetch(`${api.url}/console`);
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toContain('unsafe-inline');
    const html = await res.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/);
  });

  it('signs in, creates a stacked rule, edits it, shows a 412 conflict, the history diff and an explanation', async () => {
    await page.goto(`${api.url}/console`);
    await page.getByLabel('Token').waitFor();
    await expectNoAxeViolations('the sign-in form');
    await page.getByLabel('Token').fill(api.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Signed in.');
    expect(await page.evaluate("sessionStorage.getItem('sluice.console.token')")).toBe(api.adminToken);

    // create: first an invalid rule, whose 400 is shown next to the field
    await page.getByRole('button', { name: 'New rule' }).click();
    const editor = page.getByLabel('Rule (JSON, see docs/rules.md)');
    await editor.fill(JSON.stringify({ ...STACKED, limits: [{ ...STACKED.limits[0], capacity: -1 }] }));
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#rule-error').textContent()).toMatch(/^400: .*capacity/);
    expect(await editor.getAttribute('aria-invalid')).toBe('true');

    await editor.fill(JSON.stringify(STACKED, null, 2));
    await page.getByRole('button', { name: 'Save' }).click();
    const row = page.locator('tr[data-rule="search"]');
    await row.waitFor();
    expect(await row.textContent()).toContain('v2');
    // each limit in the words the API serves (ruleSummary), a concurrency limit's max included
    const limitsCell = row.locator('td').nth(2);
    expect(await limitsCell.locator('div').allTextContents()).toEqual([
      'burst: 20 per x-api-key, 10 more every 1s (token bucket)',
      'daily: 10000 per x-api-key in any 1d (sliding window)',
      'everyone: 1000 for all clients together, 1000 more every 1s (token bucket)',
      'inflight: 5 at once per x-api-key',
    ]);

    // a second rule, so explain has something to choose between
    const free = await adminCall('POST', '/rules', {
      name: 'search-free',
      match: { path: '/search/**', headers: { 'x-tier': 'free' } },
      limit: { capacity: 5, refill: 1, period: '1s' },
      priority: 5,
      shadow: true,
    });
    expect(free.status).toBe(201);

    // edit: version 1 → 2
    await page.getByRole('button', { name: 'Edit search', exact: true }).click();
    await expect.poll(() => editor.inputValue()).toContain('"burst"');
    await editor.fill(JSON.stringify({ ...STACKED, priority: 2 }, null, 2));
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Saved search (version 2).');
    await page.screenshot({ path: path.join(shots, 'console-rules.png') });

    // 412: the page edits version 2 while someone else makes version 3
    await page.getByRole('button', { name: 'Edit search', exact: true }).click();
    await expect.poll(() => editor.inputValue()).toContain('"priority": 2');
    const current = await adminCall('GET', `/rules/${(await adminCall('GET', '/rules')).body.items[0].id}`);
    const { id, version, createdAt, updatedAt, ...fields } = current.body;
    const behind = await adminCall(
      'PUT',
      `/rules/${id}`,
      { ...fields, description: 'changed behind your back' },
      version,
    );
    expect(behind.status).toBe(200);
    await editor.fill(JSON.stringify({ ...STACKED, priority: 3 }, null, 2));
    await page.getByRole('button', { name: 'Save' }).click();
    const conflict = page.locator('#conflict');
    await conflict.waitFor({ state: 'visible' });
    expect(await page.locator('#conflict-text').textContent()).toContain(
      'You edited version 2; the rule is now at version 3',
    );
    expect(await page.locator('#conflict-current').textContent()).toContain('changed behind your back');
    await conflict.scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(shots, 'console-conflict.png') });
    await expectNoAxeViolations('the editor showing a conflict');
    // never overwritten
    const after = await adminCall('GET', `/rules/${id}`);
    expect(after.body).toMatchObject({ version: 3, priority: 2, description: 'changed behind your back' });
    // the user chooses to reload: the text becomes version 3, and a save then applies to it
    const versionCell = row.locator('td[data-label="Version"]');
    expect(await versionCell.textContent()).toBe('2');
    await page.getByRole('button', { name: 'Load the current version (drops your edit)' }).click();
    expect(await editor.inputValue()).toContain('changed behind your back');
    // the list follows: it shows the version now being edited, not the one the edit started from
    await expect.poll(() => versionCell.textContent()).toBe('3');
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Saved search (version 4).');

    // history with the diff between versions
    await page.getByRole('button', { name: 'History of search', exact: true }).click();
    const v3 = page.locator('#history-list li[data-version="3"]');
    await v3.waitFor();
    expect(await v3.textContent()).toContain('description');
    expect(await v3.locator('.old').textContent()).toBe(JSON.stringify(STACKED.description));
    expect(await v3.locator('.new').textContent()).toBe('"changed behind your back"');
    const v2 = page.locator('#history-list li[data-version="2"]');
    expect(await v2.textContent()).toMatch(/priority: 0 → 2/);
    // no Redis for analytics on this server: the API's note, not an error
    await expect
      .poll(() => page.locator('#offenders').textContent())
      .toMatch(/^Top offenders are not available: the rules API has no REDIS_URL/);

    // explain a request
    await page.getByLabel('Path').fill('/search/./books?q=x');
    await page.getByLabel('Client IP').fill('2001:db8:1:2::9');
    await page.getByLabel('Headers (one name: value per line)').fill('x-api-key: key-123\nx-tier: pro');
    await page.getByRole('button', { name: 'Explain' }).click();
    const chosen = page.locator('#explain-chosen');
    await chosen.waitFor();
    expect(await chosen.textContent()).toBe('Rule chosen: search');
    const result = await page.locator('#explain-result').textContent();
    expect(result).toContain('/search/books');
    // x-api-key is a credential: shown only by its digest (docs/rules.md, "Secret client keys")
    expect(result).toMatch(/header:~[0-9a-f]{24}/);
    expect(result).not.toContain('key-123');
    expect(result).toContain('global');
    expect(await page.locator('#explain-considered').textContent()).toContain('header x-tier is not "free"');
    await page.locator('section[aria-labelledby="explain-title"]').screenshot({
      path: path.join(shots, 'console-explain.png'),
    });
    await expectNoAxeViolations('rules, history, offenders and an explanation');

    // phones: the same page at 390 and 360 px, nothing wider than the screen, still no violation
    for (const width of [390, 360]) {
      await expectNoSidewaysSpill(width, 'rules, history and an explanation');
      await page.getByRole('button', { name: 'Edit search', exact: true }).click();
      await expect.poll(() => editor.inputValue()).toContain('"burst"');
      await expectNoSidewaysSpill(width, 'the editor');
    }
    await page.screenshot({ path: path.join(shots, 'console-phone.png'), fullPage: true });
    await expectNoAxeViolations('at 360 px');
    await page.setViewportSize({ width: 1366, height: 860 });

    expect(pageErrors).toEqual([]);
  }, 90_000);

  it('shows lease mode, charge and refund in the list and the editor', async () => {
    const settled = await adminCall('POST', '/rules', {
      name: 'uploads',
      match: { path: '/uploads/**' },
      limits: [{ name: 'bytes', capacity: 1000000, refill: 100000, period: '1s' }],
      mode: 'lease',
      charge: { from: 'header', header: 'x-cost', max: 50 },
      refund: { statuses: ['5xx', 429] },
    });
    expect(settled.status, JSON.stringify(settled.body)).toBe(201);
    await page.getByRole('button', { name: 'Reload' }).click();
    const row = page.locator('tr[data-rule="uploads"]');
    await row.waitFor();
    expect(await row.locator('td[data-label="State"] .tag.life').allTextContents()).toEqual([
      'lease mode',
      'charge: response header x-cost, at most 50',
      'refund: 5xx, 429',
    ]);
    await page.getByRole('button', { name: 'Edit uploads', exact: true }).click();
    await expect
      .poll(() => page.locator('#rule-lifecycle').textContent())
      .toBe('Mode and settling: lease mode · charge: response header x-cost, at most 50 · refund: 5xx, 429.');
    // defaults are said too, and the line follows the text as it is edited
    await page.getByLabel('Rule (JSON, see docs/rules.md)').fill(
      JSON.stringify({
        name: 'uploads',
        match: { path: '/uploads/**' },
        limit: { capacity: 5, refill: 1, period: '1s' },
      }),
    );
    expect(await page.locator('#rule-lifecycle').textContent()).toBe(
      'Mode and settling: exact mode · no charge at the response · no refund.',
    );
    await page.getByRole('button', { name: 'Cancel' }).click();
    await expectNoAxeViolations('a rule with lease mode, charge and refund');
  });

  it('shows API values as text, never as markup', async () => {
    const created = await adminCall('POST', '/rules', {
      name: 'markup',
      description: '<img src=x onerror="window.__pwned=1">',
      match: { path: '/x/<b>y</b>' },
      unlimited: true,
    });
    // the path refuses `<`? then the description alone carries the markup
    if (created.status !== 201) {
      expect(
        (
          await adminCall('POST', '/rules', {
            name: 'markup',
            description: '<img src=x onerror="window.__pwned=1">',
            match: { path: '/x' },
            unlimited: true,
          })
        ).status,
      ).toBe(201);
    }
    await page.getByRole('button', { name: 'Reload' }).click();
    await page.locator('tr[data-rule="markup"]').waitFor();
    await page.getByRole('button', { name: 'Edit markup' }).click();
    await expect.poll(() => page.getByLabel('Rule (JSON, see docs/rules.md)').inputValue()).toContain('<img');
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate('window.__pwned')).toBeUndefined();
  });

  it('asks before saving a limit under another algorithm, saying its counters start afresh', async () => {
    const created = await adminCall('POST', '/rules', {
      name: 'algo',
      match: { path: '/algo/**' },
      limits: [
        { name: 'burst', capacity: 20, refill: 10, period: '1s' },
        { name: 'daily', algorithm: 'sliding-window', max: 100, window: '1d' },
      ],
    });
    expect(created.status).toBe(201);
    await page.getByRole('button', { name: 'Reload' }).click();
    await page.getByRole('button', { name: 'Edit algo', exact: true }).click();
    const editor = page.getByLabel('Rule (JSON, see docs/rules.md)');
    await expect.poll(() => editor.inputValue()).toContain('"burst"');
    const edited = {
      name: 'algo',
      match: { path: '/algo/**' },
      limits: [
        { name: 'burst', algorithm: 'sliding-window', max: 20, window: '1s' },
        { name: 'daily', algorithm: 'sliding-window', max: 200, window: '1d' },
      ],
    };
    const notice =
      'limit `burst` changes algorithm: its counters start afresh (token-bucket → sliding-window)';

    // declined: nothing is saved, and the editor says why
    dismissDialogs = true;
    dialogs.length = 0;
    await editor.fill(JSON.stringify(edited, null, 2));
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#rule-error').textContent()).toContain(notice);
    expect(dialogs).toEqual([`${notice}\n\nSave anyway?`]);
    expect((await adminCall('GET', `/rules/${created.body.id}`)).body.version).toBe(1);

    // accepted: saved; a change of numbers alone asks nothing
    dismissDialogs = false;
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Saved algo (version 2).');
    dialogs.length = 0;
    await page.getByRole('button', { name: 'Edit algo', exact: true }).click();
    await expect.poll(() => editor.inputValue()).toContain('"max": 200');
    await editor.fill(
      JSON.stringify({ ...edited, limits: [edited.limits[0], { ...edited.limits[1], max: 300 }] }),
    );
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Saved algo (version 3).');
    expect(dialogs).toEqual([]);
    expect(pageErrors).toEqual([]);
  });

  it('learns what the read token may do without trying a write', async () => {
    const requests: string[] = [];
    const record = (r: { method(): string; url(): string }) =>
      requests.push(`${r.method()} ${new URL(r.url()).pathname}`);
    page.on('request', record);
    try {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByLabel('Token').fill(api.readToken);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect
        .poll(() => page.locator('#status').textContent())
        .toBe('Signed in with the read token: changes are disabled.');
      expect(requests.filter((r) => !r.startsWith('GET '))).toEqual([]);
      expect(requests).toContain('GET /auth/me');
      expect(await page.getByRole('button', { name: 'History of search', exact: true }).count()).toBe(1);
      expect(await page.getByRole('button', { name: 'Edit search', exact: true }).count()).toBe(0);
      expect(await page.getByRole('button', { name: 'New rule' }).isHidden()).toBe(true);
      await expectNoAxeViolations('signed in with the read token');
    } finally {
      page.off('request', record);
    }
  });
});
