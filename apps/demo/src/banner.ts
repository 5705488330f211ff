/** The text the demo prints once everything is ready: where things are, and four examples to try. */
import { toFileEntry } from '@sluice/cli';
import { limitSummary, type Rule, ruleSummary } from '@sluice/shared';
import type { DemoIdentities } from './identities.js';
import { style } from './output.js';

export interface BannerInfo {
  gatewayUrl: string;
  adminUrl: string;
  rulesApiUrl: string;
  upstreamUrl: string;
  adminToken: string;
  tokensPath: string;
  dataDir: string;
  refreshSeconds: number;
  seedSummary: string;
  /** the rule the burst and PUT examples use, as the API has it now */
  perIpRule: Rule | undefined;
  /** the stacked rule and the exemption the 4th example uses, as the API has them now */
  ordersRule?: Rule | undefined;
  partnerRule?: Rule | undefined;
  /** the per-customer rules (free and pro) the 5th example uses, and the tokens to try them with */
  accountRule?: Rule | undefined;
  accountProRule?: Rule | undefined;
  identities?: DemoIdentities | undefined;
}

/** Single-quotes a string for POSIX shells. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export function banner(info: BannerInfo): string {
  // the examples fit a single-bucket rule; one edited into another form gets the generic wording
  const rule = info.perIpRule !== undefined && 'limit' in info.perIpRule ? info.perIpRule : undefined;
  const hello = `${info.gatewayUrl}/api/hello`;
  const burst = rule ? Math.ceil(rule.limit.capacity) : 5;
  const line = style('cyan', '─'.repeat(78));
  const lines = [
    '',
    line,
    style('bold', style('green', '  Sluice demo is running.')),
    '',
    `  Gateway        ${info.gatewayUrl}   (proxies to the demo upstream ${info.upstreamUrl})`,
    `  Gateway admin  ${info.adminUrl}   (/healthz /readyz /metrics)`,
    `  Rules API      ${info.rulesApiUrl}   (API docs: ${info.rulesApiUrl}/docs)`,
    `  Console        ${info.rulesApiUrl}/console   (sign in with the admin token)`,
    `  Admin token    ${style('bold', info.adminToken)}`,
    `  Data           ${info.dataDir}   (tokens in ${info.tokensPath})`,
    `  Demo rules     ${info.seedSummary}`,
    '',
    style('bold', '  1) A request through the gateway: 200, with RateLimit headers'),
    `     curl -i ${hello}`,
    '',
    style(
      'bold',
      `  2) A burst past ${rule ? `"${rule.name}" (${burst} per IP)` : 'the per-IP limit'}: the last request gets a 429`,
    ),
    `     for i in $(seq ${burst}); do curl -s -o /dev/null -w '%{http_code} ' ${hello}; done; echo; curl -i ${hello}`,
    '',
  ];
  if (rule) {
    const raised = toFileEntry({
      ...rule,
      limit: { ...rule.limit, capacity: 100, refill: 100 },
      maxDebt: 100,
    });
    lines.push(
      style(
        'bold',
        `  3) Raise the limit over REST; the gateway picks it up within ${info.refreshSeconds} s`,
      ),
      `     (If-Match makes a concurrent edit fail with 412: run it twice to see)`,
      `     curl -i -X PUT ${info.rulesApiUrl}/rules/${rule.id} \\`,
      `       -H 'Authorization: Bearer ${info.adminToken}' -H 'If-Match: "${rule.version}"' \\`,
      `       -H 'Content-Type: application/json' \\`,
      `       -d ${shellQuote(JSON.stringify(raised))}`,
      '',
    );
  }
  lines.push(...stackedExample(info));
  lines.push(...identityExample(info));
  lines.push(
    style('bold', '  Keep rules in git:'),
    `     RULES_API_URL=${info.rulesApiUrl} RULES_API_TOKEN=${info.adminToken} pnpm -s rules export > rules.yaml`,
    `     RULES_API_URL=${info.rulesApiUrl} RULES_API_TOKEN=${info.adminToken} pnpm rules apply --dry-run rules.yaml`,
    '',
    style('bold', '  Ready. Ctrl-C stops everything.'),
    line,
    '',
  );
  return lines.join('\n');
}

/**
 * The 4th example: the stacked rule's headers (one item per limit), a burst that ends in a 429 naming
 * the limit, and the exemption. Numbers and names come from the rules as the API has them now.
 */
function stackedExample(info: BannerInfo): string[] {
  const orders = info.ordersRule;
  if (orders === undefined || !('limits' in orders)) return [];
  const burstLimit = orders.limits[0];
  if (burstLimit === undefined || burstLimit.algorithm !== 'token-bucket') return [];
  const burst = Math.ceil(burstLimit.capacity);
  const keyHeader = burstLimit.client.by === 'header' ? burstLimit.client.name : undefined;
  const url = `${info.gatewayUrl}${examplePath(orders.match.path, '/api/orders/42')}`;
  const key = keyHeader ? ` -H '${keyHeader}: alice'` : '';
  const lines = [
    style('bold', `  4) Stacked limits: "${orders.name}" counts every request against all of its limits`),
    ...orders.limits.map((limit) => `       ${limitSummary(limit)}`),
    `     One RateLimit item per limit, named "<rule>.<limit>":`,
    `     curl -si${key} ${url} | grep -i '^ratelimit'`,
    `     Past the burst of ${burst}${keyHeader ? ' (each key has its own)' : ''}: a 429 naming the limit ("limit":"${burstLimit.name}"),`,
    `     and a denied request charges none of the limits: the daily quota counts only the 200s`,
    `     for i in $(seq ${burst}); do curl -s -o /dev/null -w '%{http_code} '${key} ${url}; done; echo; curl -si${key} ${url}`,
  ];
  const partner = info.partnerRule;
  const headers = partner && 'unlimited' in partner ? Object.entries(partner.match.headers ?? {}) : [];
  if (partner !== undefined && headers.length > 0) {
    const sent = headers.map(([name, value]) => ` -H ${shellQuote(`${name}: ${value}`)}`).join('');
    lines.push(
      `     The exemption "${partner.name}" wins (priority ${partner.priority}): 200 and no RateLimit headers, however often`,
      `     curl -si${key}${sent} ${url} | grep -i -e '^HTTP' -e '^ratelimit'`,
    );
  }
  lines.push('');
  return lines;
}

/**
 * The 5th example: limits per verified customer. Alice's token (plan pro) gets the pro rule's larger
 * budget, Bob's (plan free) the plain one; a made-up `x-plan: pro` header changes nothing.
 */
function identityExample(info: BannerInfo): string[] {
  const free = info.accountRule;
  const pro = info.accountProRule;
  const tokens = info.identities;
  if (free === undefined || pro === undefined || tokens === undefined) return [];
  const url = `${info.gatewayUrl}${examplePath(free.match.path, '/api/account/me')}`;
  const bearer = (token: string) => `-H 'Authorization: Bearer ${token}'`;
  return [
    style('bold', '  5) Limits per verified customer (JWT): a larger budget for the pro plan'),
    `     "${pro.name}" (plan pro): ${ruleSummary(pro).join('; ')}`,
    `     "${free.name}" (plan free): ${ruleSummary(free).join('; ')}`,
    `     Alice (sub alice, plan pro):`,
    `     curl -si ${bearer(tokens.alice)} ${url} | grep -i '^ratelimit'`,
    `     Bob (sub bob, plan free):`,
    `     curl -si ${bearer(tokens.bob)} ${url} | grep -i '^ratelimit'`,
    `     A made-up header changes nothing: only the verified claim counts, Bob stays on free`,
    `     curl -si ${bearer(tokens.bob)} -H 'x-plan: pro' ${url} | grep -i '^ratelimit'`,
    '',
  ];
}

/** A request path the rule takes: `/api/orders/**` → `/api/orders/42`; a path with `*` inside → `fallback`. */
function examplePath(rulePath: string, fallback: string): string {
  const prefix = rulePath.endsWith('/**') ? rulePath.slice(0, -3) : rulePath;
  if (prefix.includes('*')) return fallback;
  return prefix === rulePath ? rulePath : `${prefix}/42`;
}
