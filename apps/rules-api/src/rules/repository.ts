/**
 * All SQL of the rules API. Every write runs in one transaction: the rule row, its history row and
 * the rule-set version bump commit together or not at all.
 */
import type { Rule, RuleFields } from '@sluice/shared';
import { and, asc, desc, eq, gt, inArray, lt, type SQL, sql } from 'drizzle-orm';
import type { Database, Db } from '../db/client.js';
import { type HistoryAction, ruleHistory, rules, rulesetVersion } from '../db/schema.js';
import {
  PG_UNIQUE_VIOLATION,
  RuleNameTakenError,
  RuleNotFoundError,
  sqlState,
  VersionMismatchError,
} from '../errors.js';
import type { TagCondition } from '../http/etag.js';
import { orderedRule, ruleDefinition, ruleOf } from './definition.js';

export type Actor = string;

export interface HistoryEntry {
  version: number;
  action: HistoryAction;
  at: string;
  actor: Actor;
  rule: Rule;
}

export interface Snapshot {
  version: number;
  rules: Rule[];
}

export interface WriteResult {
  rule: Rule;
  /** the rule-set version this write produced */
  rulesetVersion: number;
}

type RuleRow = typeof rules.$inferSelect;
type RuleInsert = typeof rules.$inferInsert;

export function toRule(row: RuleRow): Rule {
  return ruleOf(row.definition, {
    id: row.id,
    version: row.version,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  });
}

/** The columns of one rule: its definition, and the copies of it that queries use. */
function toRow(fields: RuleFields): Omit<RuleInsert, 'id' | 'version' | 'createdAt' | 'updatedAt'> {
  return {
    name: fields.name,
    enabled: fields.enabled,
    priority: fields.priority,
    definition: ruleDefinition(fields),
  };
}

/** `version IN (…)` for an If-Match condition; no condition (or `*`) → any version. */
function versionCondition(condition: TagCondition | undefined): SQL | undefined {
  if (condition === undefined || condition.any) return undefined;
  return condition.versions.length > 0 ? inArray(rules.version, condition.versions) : sql`false`;
}

function describeCondition(condition: TagCondition): string {
  return condition.any ? '*' : condition.versions.length > 0 ? condition.versions.join(' or ') : 'no version';
}

/** Turns the unique violation on `rules.name` into a 409. */
function rethrowNameTaken(err: unknown, name: string): never {
  if (sqlState(err) === PG_UNIQUE_VIOLATION) throw new RuleNameTakenError(name);
  throw err;
}

export class RulesRepository {
  private readonly db: Db;

  constructor(private readonly database: Database) {
    this.db = database.db;
  }

  /**
   * Bumps the rule-set counter and returns the new value. Called last in every write transaction:
   * the row lock it takes is held until commit, so writers get versions in commit order and a
   * snapshot never sees version n+1 without change n+1 (nor the other way round).
   */
  private async bumpRulesetVersion(tx: Db): Promise<number> {
    const [row] = await tx
      .insert(rulesetVersion)
      .values({ id: 1, version: 1 })
      .onConflictDoUpdate({ target: rulesetVersion.id, set: { version: sql`${rulesetVersion.version} + 1` } })
      .returning({ version: rulesetVersion.version });
    return row!.version;
  }

  private async recordChange(tx: Db, action: HistoryAction, rule: Rule, version: number, actor: Actor) {
    const rulesetVersionNow = await this.bumpRulesetVersion(tx);
    await tx
      .insert(ruleHistory)
      .values({ ruleId: rule.id, version, action, actor, rule, rulesetVersion: rulesetVersionNow });
    return rulesetVersionNow;
  }

  async create(fields: RuleFields, actor: Actor): Promise<WriteResult> {
    try {
      return await this.database.transaction(async (tx) => {
        const [row] = await tx.insert(rules).values(toRow(fields)).returning();
        const rule = toRule(row!);
        return { rule, rulesetVersion: await this.recordChange(tx, 'create', rule, rule.version, actor) };
      });
    } catch (err) {
      rethrowNameTaken(err, fields.name);
    }
  }

  /** Creates many rules in one transaction and one rule-set version (imports, benchmarks). */
  async createMany(list: RuleFields[], actor: Actor): Promise<number> {
    if (list.length === 0) return this.currentRulesetVersion();
    return this.database.transaction(async (tx) => {
      const created: Rule[] = [];
      // 1,000 rows × 4 columns stays far below Postgres' 65,535 bind parameters.
      for (let i = 0; i < list.length; i += 1_000) {
        const rows = await tx
          .insert(rules)
          .values(list.slice(i, i + 1_000).map(toRow))
          .returning();
        created.push(...rows.map(toRule));
      }
      const version = await this.bumpRulesetVersion(tx);
      for (let i = 0; i < created.length; i += 1_000) {
        await tx.insert(ruleHistory).values(
          created.slice(i, i + 1_000).map((rule) => ({
            ruleId: rule.id,
            version: rule.version,
            action: 'create' as const,
            actor,
            rule,
            rulesetVersion: version,
          })),
        );
      }
      return version;
    });
  }

  async get(id: string): Promise<Rule | undefined> {
    const [row] = await this.db.select().from(rules).where(eq(rules.id, id));
    return row ? toRule(row) : undefined;
  }

  /** One page ordered by name, after `afterName`; `hasMore` says whether another page follows. */
  async list(options: {
    enabled?: boolean;
    limit: number;
    afterName?: string;
  }): Promise<{ items: Rule[]; hasMore: boolean }> {
    const conditions = [
      options.enabled === undefined ? undefined : eq(rules.enabled, options.enabled),
      options.afterName === undefined ? undefined : gt(rules.name, options.afterName),
    ];
    const rows = await this.db
      .select()
      .from(rules)
      .where(and(...conditions))
      .orderBy(asc(rules.name))
      .limit(options.limit + 1);
    return { items: rows.slice(0, options.limit).map(toRule), hasMore: rows.length > options.limit };
  }

  /** Replaces every writable field; `ifMatch` makes it conditional on the current version. */
  async replace(id: string, fields: RuleFields, ifMatch: TagCondition | undefined, actor: Actor) {
    try {
      return await this.database.transaction(async (tx): Promise<WriteResult> => {
        const [row] = await tx
          .update(rules)
          .set({ ...toRow(fields), version: sql`${rules.version} + 1`, updatedAt: sql`now()` })
          .where(and(eq(rules.id, id), versionCondition(ifMatch)))
          .returning();
        if (!row) await this.explainMiss(tx, id, ifMatch);
        const rule = toRule(row!);
        return { rule, rulesetVersion: await this.recordChange(tx, 'update', rule, rule.version, actor) };
      });
    } catch (err) {
      rethrowNameTaken(err, fields.name);
    }
  }

  async delete(id: string, ifMatch: TagCondition | undefined, actor: Actor): Promise<WriteResult> {
    return this.database.transaction(async (tx) => {
      const [row] = await tx
        .delete(rules)
        .where(and(eq(rules.id, id), versionCondition(ifMatch)))
        .returning();
      if (!row) await this.explainMiss(tx, id, ifMatch);
      const rule = toRule(row!);
      // A delete is one more change of the rule: its history entry carries the next version.
      return { rule, rulesetVersion: await this.recordChange(tx, 'delete', rule, rule.version + 1, actor) };
    });
  }

  /** A conditional write touched no row: 404 when the rule is gone, else 412. Always throws. */
  private async explainMiss(tx: Db, id: string, ifMatch: TagCondition | undefined): Promise<never> {
    const [current] = await tx.select({ version: rules.version }).from(rules).where(eq(rules.id, id));
    if (!current || ifMatch === undefined) throw new RuleNotFoundError(id);
    throw new VersionMismatchError(id, current.version, describeCondition(ifMatch));
  }

  /**
   * The rule's changes, newest first; `undefined` when the id never had any (404). A deleted
   * rule's history stays readable.
   */
  async history(
    id: string,
    options: { limit: number; beforeId?: number },
  ): Promise<{ items: HistoryEntry[]; nextBeforeId: number | undefined } | undefined> {
    const rows = await this.db
      .select()
      .from(ruleHistory)
      .where(
        and(
          eq(ruleHistory.ruleId, id),
          options.beforeId === undefined ? undefined : lt(ruleHistory.id, options.beforeId),
        ),
      )
      .orderBy(desc(ruleHistory.id))
      .limit(options.limit + 1);
    if (rows.length === 0 && options.beforeId === undefined) return undefined;
    const page = rows.slice(0, options.limit);
    return {
      items: page.map((r) => ({
        version: r.version,
        action: r.action,
        at: r.at.toISOString(),
        actor: r.actor,
        rule: orderedRule(r.rule),
      })),
      nextBeforeId: rows.length > options.limit ? page[page.length - 1]!.id : undefined,
    };
  }

  /** The rule-set version; 0 before the first write. One tiny indexed read. */
  async currentRulesetVersion(): Promise<number> {
    const [row] = await this.db
      .select({ version: rulesetVersion.version })
      .from(rulesetVersion)
      .where(eq(rulesetVersion.id, 1));
    return row?.version ?? 0;
  }

  /** The version and every rule, read in one snapshot so they always agree. */
  async snapshot(): Promise<Snapshot> {
    return this.database.transaction(
      async (tx) => {
        const [versionRow] = await tx
          .select({ version: rulesetVersion.version })
          .from(rulesetVersion)
          .where(eq(rulesetVersion.id, 1));
        const rows = await tx.select().from(rules).orderBy(asc(rules.name));
        return { version: versionRow?.version ?? 0, rules: rows.map(toRule) };
      },
      { isolationLevel: 'repeatable read', accessMode: 'read only' },
    );
  }
}
