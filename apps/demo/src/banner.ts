/** The text the demo prints once everything is ready: where things are, and three commands to try. */
import { toFileEntry } from '@sluice/cli';
import type { Rule } from '@sluice/shared';
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
}

/** Single-quotes a string for POSIX shells. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export function banner(info: BannerInfo): string {
  const rule = info.perIpRule;
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
