/**
 * A small client for the rules API (docs/rules-api.md): just the calls the rules-file workflow and the demo need.
 * Every failure is a `RulesApiError` with a code, so callers decide per code (a 412 is a conflict to
 * report, a 401 a token to fix) instead of parsing messages.
 */
import type { Rule, RuleInput } from '@sluice/shared';

export type RulesApiErrorCode =
  | 'UNREACHABLE'
  | 'UNAUTHORIZED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'NAME_TAKEN'
  | 'VERSION_MISMATCH'
  | 'INVALID'
  | 'HTTP_ERROR';

export class RulesApiError extends Error {
  constructor(
    readonly code: RulesApiErrorCode,
    message: string,
    /** HTTP status, absent when the API could not be reached */
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'RulesApiError';
  }
}

export interface RulesApiClientOptions {
  /** base URL, e.g. `http://127.0.0.1:8081` */
  url: string;
  /** bearer token (`ADMIN_TOKEN` to write, `READ_TOKEN` is enough to read) */
  token?: string | undefined;
  /** per request; default 10 s */
  timeoutMs?: number;
}

/** One page of `GET /rules`. */
interface RulePage {
  items: Rule[];
  nextCursor: string | null;
}

const CODE_BY_STATUS: Record<number, RulesApiErrorCode> = {
  400: 'INVALID',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'NAME_TAKEN',
  412: 'VERSION_MISMATCH',
};

/** The largest page `GET /rules` allows: fewer round trips for big rule sets. */
const PAGE_LIMIT = 1000;

export class RulesApiClient {
  readonly url: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;

  constructor(options: RulesApiClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.#token = options.token || undefined;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** Every rule, ordered by name, following `nextCursor` until the last page. */
  async listRules(): Promise<Rule[]> {
    const rules: Rule[] = [];
    let cursor: string | null = null;
    do {
      const query = new URLSearchParams({ limit: String(PAGE_LIMIT) });
      if (cursor !== null) query.set('cursor', cursor);
      const page: RulePage = await this.#request('GET', `/rules?${query}`);
      rules.push(...page.items);
      cursor = page.nextCursor;
    } while (cursor !== null);
    return rules;
  }

  getRule(id: string): Promise<Rule> {
    return this.#request('GET', `/rules/${encodeURIComponent(id)}`);
  }

  createRule(input: RuleInput): Promise<Rule> {
    return this.#request('POST', '/rules', { body: input });
  }

  /** PUT: replaces every writable field. With `ifMatchVersion`, a concurrent change answers `VERSION_MISMATCH`. */
  replaceRule(id: string, input: RuleInput, ifMatchVersion?: number): Promise<Rule> {
    return this.#request('PUT', `/rules/${encodeURIComponent(id)}`, { body: input, ifMatchVersion });
  }

  async deleteRule(id: string, ifMatchVersion?: number): Promise<void> {
    await this.#request('DELETE', `/rules/${encodeURIComponent(id)}`, { ifMatchVersion });
  }

  /** True when `GET /readyz` answers 200; never throws. */
  async isReady(): Promise<boolean> {
    try {
      const res = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(this.#timeoutMs) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  }

  async #request<T>(
    method: string,
    path: string,
    options: { body?: unknown; ifMatchVersion?: number | undefined } = {},
  ): Promise<T> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    if (options.ifMatchVersion !== undefined) headers['if-match'] = `"${options.ifMatchVersion}"`;
    let res: Response;
    try {
      res = await fetch(`${this.url}${path}`, {
        method,
        headers,
        body: options.body === undefined ? null : JSON.stringify(options.body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (err) {
      const why = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : err;
      throw new RulesApiError('UNREACHABLE', `cannot reach the rules API at ${this.url}: ${why}`, undefined, {
        cause: err,
      });
    }
    const text = await res.text();
    if (!res.ok) throw errorFromResponse(method, path, res.status, text);
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }
}

function errorFromResponse(method: string, path: string, status: number, text: string): RulesApiError {
  let detail = text.slice(0, 500);
  try {
    const body = JSON.parse(text) as { message?: unknown };
    if (typeof body.message === 'string') detail = body.message;
  } catch {
    // not JSON: keep the raw text
  }
  const code = CODE_BY_STATUS[status] ?? 'HTTP_ERROR';
  const hint =
    code === 'UNAUTHORIZED'
      ? ' (set RULES_API_TOKEN or --token to the admin token)'
      : code === 'FORBIDDEN'
        ? ' (this token may only read: writes need the admin token)'
        : '';
  return new RulesApiError(code, `${method} ${path.split('?')[0]} → ${status}: ${detail}${hint}`, status);
}
