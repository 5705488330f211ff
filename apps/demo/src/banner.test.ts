import { readRulesFile } from '@sluice/cli';
import { type Rule, withDefaults } from '@sluice/shared';
import { describe, expect, it } from 'vitest';
import { banner } from './banner.js';
import { repositoryRoot } from './services.js';

/** The demo rules as the API returns them after seeding. */
async function seededRules(): Promise<Record<string, Rule>> {
  const inputs = await readRulesFile(`${repositoryRoot()}apps/demo/demo-rules.yaml`);
  return Object.fromEntries(
    inputs.map((input, i) => [
      input.name,
      {
        id: `00000000-0000-4000-8000-00000000000${i}`,
        ...withDefaults(input),
        version: 1,
        createdAt: '2026-11-25T12:00:00.000Z',
        updatedAt: '2026-11-25T12:00:00.000Z',
      },
    ]),
  );
}

const info = {
  gatewayUrl: 'http://127.0.0.1:8080',
  adminUrl: 'http://127.0.0.1:9090',
  rulesApiUrl: 'http://127.0.0.1:8081',
  upstreamUrl: 'http://127.0.0.1:3000',
  adminToken: 'admin_x',
  tokensPath: '/d/demo-tokens.json',
  dataDir: '/d',
  refreshSeconds: 2,
  seedSummary: 'created …',
  perIpRule: undefined,
};

describe('banner', () => {
  it('shows curl lines for alice (pro) and bob (free) with their tokens, and a made-up x-plan that changes nothing', async () => {
    const rules = await seededRules();
    const text = banner({
      ...info,
      accountRule: rules['demo-account'],
      accountProRule: rules['demo-account-pro'],
      identities: { alice: 'eyJ.alice.sig', bob: 'eyJ.bob.sig' },
    });
    const url = 'http://127.0.0.1:8080/api/account/42';
    // each rule in the algorithm's own words (the summary the console and the CLI show)
    expect(text).toContain(
      '"demo-account-pro" (plan pro): per-sub: 10 per verified sub, 10 more every 1m (token bucket)',
    );
    expect(text).toContain(
      '"demo-account" (plan free): per-sub: 3 per verified sub, 3 more every 1m (token bucket)',
    );
    expect(text).toContain(`curl -si -H 'Authorization: Bearer eyJ.alice.sig' ${url} | grep -i '^ratelimit'`);
    expect(text).toContain(`curl -si -H 'Authorization: Bearer eyJ.bob.sig' ${url} | grep -i '^ratelimit'`);
    expect(text).toContain(
      `curl -si -H 'Authorization: Bearer eyJ.bob.sig' -H 'x-plan: pro' ${url} | grep -i '^ratelimit'`,
    );
  });

  it('shows the stacked rule (its limits, headers and a 429 naming the limit) and the exemption', async () => {
    const rules = await seededRules();
    const text = banner({
      ...info,
      perIpRule: rules['demo-per-ip'],
      ordersRule: rules['demo-orders'],
      partnerRule: rules['demo-orders-partner'],
    });
    expect(text).toContain('4) Stacked limits: "demo-orders" counts every request against all of its limits');
    expect(text).toContain('burst: 5 per x-api-key, 1 more every 1s (token bucket)');
    expect(text).toContain('daily: 100 per x-api-key in any 1d (sliding window)');
    expect(text).toContain('everyone: 30 for all clients together, 30 more every 1m (token bucket)');
    const url = 'http://127.0.0.1:8080/api/orders/42';
    expect(text).toContain(`curl -si -H 'x-api-key: alice' ${url} | grep -i '^ratelimit'`);
    expect(text).toContain('("limit":"burst")');
    expect(text).toContain(
      `for i in $(seq 5); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: alice' ${url}; done; echo; curl -si -H 'x-api-key: alice' ${url}`,
    );
    expect(text).toContain(
      `curl -si -H 'x-api-key: alice' -H 'x-partner: acme' ${url} | grep -i -e '^HTTP' -e '^ratelimit'`,
    );
  });

  it('points to the console on the rules API', () => {
    expect(banner(info)).toContain(
      'Console        http://127.0.0.1:8081/console   (sign in with the admin token)',
    );
  });

  it('leaves out the examples whose rule was deleted or changed form, instead of failing', async () => {
    const rules = await seededRules();
    const perIp = rules['demo-per-ip']!;
    const text = banner({
      ...info,
      perIpRule: {
        ...withDefaults({ name: perIp.name, match: perIp.match, unlimited: true }),
        id: perIp.id,
        version: 2,
        createdAt: perIp.createdAt,
        updatedAt: perIp.updatedAt,
      },
      ordersRule: undefined,
      partnerRule: undefined,
    });
    expect(text).toContain('A burst past the per-IP limit');
    expect(text).not.toContain('3) Raise the limit');
    expect(text).not.toContain('4) Stacked limits');
    expect(text).toContain('Ready. Ctrl-C stops everything.');
  });
});
