/**
 * The routes of the rules API (docs/rules-api.md). Handlers stay thin: parse conditions and cursors, call the repository,
 * set `Location`/`ETag`. Bodies are checked by the JSON schema first, then by `checkRule`.
 */

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { checkRule, type RuleInput, ruleSummary, withDefaults } from '@sluice/shared';
import type { FastifyPluginAsync } from 'fastify';
import { type AuthOptions, requireToken } from '../auth.js';
import { EmptyIfMatchError, InvalidCursorError, RuleNotFoundError, ValidationError } from '../errors.js';
import { decodeCursor, encodeCursor } from '../http/cursor.js';
import { etagOf, parseTagCondition, type TagCondition, tagMatches } from '../http/etag.js';
import type { RulesRepository } from './repository.js';
import {
  createRuleSchema,
  deleteRuleSchema,
  getRuleSchema,
  historySchema,
  listRulesSchema,
  replaceRuleSchema,
  snapshotSchema,
} from './schemas.js';
import type { SnapshotCache } from './snapshot-cache.js';

export interface RulesRoutesOptions {
  repository: RulesRepository;
  snapshots: SnapshotCache;
  auth: AuthOptions;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Anything that is not a UUID cannot name a rule: 404, like an unknown UUID. */
function ruleId(id: string): string {
  if (!UUID.test(id)) throw new RuleNotFoundError(id.length > 64 ? `${id.slice(0, 64)}…` : id);
  return id.toLowerCase();
}

/** True when `Accept-Encoding` lists gzip without `q=0` (RFC 9110 §12.5.3). */
export function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  return header.split(',').some((item) => {
    const [coding, ...params] = item.trim().toLowerCase().split(';');
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return (coding === 'gzip' || coding === 'x-gzip') && (q === undefined || Number(q.slice(2)) > 0);
  });
}

/** `checkRule` after the schema: `**` placement, header name for `client.by: header`, period range. */
function checkedFields(input: RuleInput) {
  const problems = checkRule(input);
  if (problems.length > 0) {
    throw new ValidationError(
      problems.map((p) => `body/${p.field.replaceAll('.', '/')} ${p.message}`).join('; '),
    );
  }
  return withDefaults(input);
}

/**
 * The condition of a write. An `If-Match` header that is present but empty is a 400: taken as "no
 * condition" it would turn a client's conditional write (a version variable left empty) into an
 * unconditional one.
 */
function ifMatchCondition(header: string | string[] | undefined): TagCondition | undefined {
  const condition = parseTagCondition(header);
  if (condition === undefined && header !== undefined) throw new EmptyIfMatchError();
  return condition;
}

function decodeOrThrow<T>(
  cursor: string | undefined,
  read: (position: Record<string, unknown>) => T | undefined,
) {
  if (cursor === undefined) return undefined;
  const position = decodeCursor(cursor);
  const value = position && read(position);
  if (value === undefined) throw new InvalidCursorError();
  return value;
}

export const rulesRoutes: FastifyPluginAsync<RulesRoutesOptions> = async (app, options) => {
  const { repository, snapshots } = options;
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.addHook('onRequest', requireToken(options.auth));

  api.post('/rules', { schema: createRuleSchema }, async (request, reply) => {
    const { rule, rulesetVersion } = await repository.create(checkedFields(request.body), request.actor!);
    snapshots.learn(rulesetVersion);
    return reply
      .code(201)
      .header('location', `/rules/${rule.id}`)
      .header('etag', etagOf(rule.version))
      .send(rule);
  });

  api.get('/rules', { schema: listRulesSchema }, async (request) => {
    const { enabled, limit = 100, cursor } = request.query;
    const afterName = decodeOrThrow(cursor, (p) => (typeof p.after === 'string' ? p.after : undefined));
    const page = await repository.list({ enabled, limit, afterName });
    const last = page.items[page.items.length - 1];
    return {
      items: page.items,
      nextCursor: page.hasMore && last ? encodeCursor({ after: last.name }) : null,
      // beside the rules, not in them: a rule is returned exactly as written (PUT and the CLI round-trip it)
      summaries: Object.fromEntries(page.items.map((rule) => [rule.id, ruleSummary(rule)])),
    };
  });

  // Static segment: find-my-way prefers it over `/rules/:id`.
  api.get('/rules/snapshot', { schema: snapshotSchema }, async (request, reply) => {
    const condition = parseTagCondition(request.headers['if-none-match']);
    reply.header('vary', 'accept-encoding');
    if (condition) {
      // A tag newer than what this replica knows proves its cached version stale: ask the database.
      const newest = condition.any ? 0 : Math.max(0, ...condition.versions);
      const version = await snapshots.currentVersion(newest);
      if (tagMatches(condition, version)) {
        return reply.code(304).header('etag', etagOf(version)).send(undefined);
      }
    }
    const body = await snapshots.full();
    reply
      .code(200)
      .header('etag', etagOf(body.version))
      .header('content-type', 'application/json; charset=utf-8');
    // Serialised (and compressed) once per version; Fastify sends a Buffer as is.
    if (acceptsGzip(request.headers['accept-encoding'])) {
      return reply.header('content-encoding', 'gzip').send((await body.gzipped()) as never);
    }
    return reply.send(body.json as never);
  });

  api.get('/rules/:id', { schema: getRuleSchema }, async (request, reply) => {
    const id = ruleId(request.params.id);
    const rule = await repository.get(id);
    if (!rule) throw new RuleNotFoundError(id);
    return reply.header('etag', etagOf(rule.version)).send(rule);
  });

  api.put('/rules/:id', { schema: replaceRuleSchema }, async (request, reply) => {
    const id = ruleId(request.params.id);
    const ifMatch = ifMatchCondition(request.headers['if-match']);
    const fields = checkedFields(request.body);
    const { rule, rulesetVersion } = await repository.replace(id, fields, ifMatch, request.actor!);
    snapshots.learn(rulesetVersion);
    return reply.header('etag', etagOf(rule.version)).send(rule);
  });

  api.delete('/rules/:id', { schema: deleteRuleSchema }, async (request, reply) => {
    const id = ruleId(request.params.id);
    const ifMatch = ifMatchCondition(request.headers['if-match']);
    const { rulesetVersion } = await repository.delete(id, ifMatch, request.actor!);
    snapshots.learn(rulesetVersion);
    return reply.code(204).send();
  });

  api.get('/rules/:id/history', { schema: historySchema }, async (request) => {
    const id = ruleId(request.params.id);
    const { limit = 100, cursor } = request.query;
    const beforeId = decodeOrThrow(cursor, (p) =>
      Number.isSafeInteger(p.before) && (p.before as number) > 0 ? (p.before as number) : undefined,
    );
    const page = await repository.history(id, { limit, beforeId });
    if (!page) throw new RuleNotFoundError(id);
    return {
      items: page.items,
      nextCursor: page.nextBeforeId === undefined ? null : encodeCursor({ before: page.nextBeforeId }),
    };
  });
};
