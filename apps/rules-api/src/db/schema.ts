/**
 * Tables of the rules API. Migrations in `migrations/` (repo root) are generated from this file with
 * `pnpm --filter @sluice/rules-api db:generate`; never edit them by hand. A step that moves data
 * (0002) is an empty migration from `db:generate --custom`, filled with SQL, between the generated
 * migration that adds the new columns and the one that drops the old.
 */
import type { Rule, RuleFields } from '@sluice/shared';
import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  customType,
  index,
  integer,
  json,
  pgTable,
  smallint,
  text,
  timestamp,
  uuid,
} from 'drizzle-orm/pg-core';

/**
 * Rule names compare byte by byte (`COLLATE "C"`), so `ORDER BY name`, the unique index and the
 * keyset cursor (`name > $after`) agree with each other and with a plain JS sort, whatever the
 * database's default locale is (en_US would ignore `-` and `.` when sorting).
 */
const byteOrderedText = customType<{ data: string }>({
  dataType: () => 'text COLLATE "C"',
});

/**
 * One row per rule. The rule itself is `definition`: its writable fields as written, defaults filled
 * in, stored as `json` (which keeps the text, so the key order, as written; jsonb would reorder the
 * keys). The table does not follow the rule's shape, so a new rule field needs no migration. `name`,
 * `enabled` and `priority` are copies kept as columns for the unique name, ordering and filters;
 * the repository writes them together with `definition`, never apart.
 */
export const rules = pgTable(
  'rules',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    name: byteOrderedText('name').notNull().unique('rules_name_unique'),
    enabled: boolean('enabled').notNull(),
    priority: integer('priority').notNull(),
    definition: json('definition').$type<RuleFields>().notNull(),
    /** starts at 1, +1 on every change of this rule (optimistic concurrency, ETag) */
    version: integer('version').notNull().default(1),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [check('rules_version_positive', sql`${t.version} >= 1`)],
);

export const HISTORY_ACTIONS = ['create', 'update', 'delete'] as const;
export type HistoryAction = (typeof HISTORY_ACTIONS)[number];

/** One row per committed change. No foreign key: the history of a deleted rule stays readable. */
export const ruleHistory = pgTable(
  'rule_history',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    ruleId: uuid('rule_id').notNull(),
    /** the rule's version after this change (a delete is a change too: last version + 1) */
    version: integer('version').notNull(),
    action: text('action', { enum: HISTORY_ACTIONS }).notNull(),
    /** which credential wrote: `admin`, `anonymous` (auth disabled)…; never the token itself */
    actor: text('actor').notNull(),
    at: timestamp('at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /** the rule as the API returned it after the change (before it, for a delete); `json` keeps key order */
    rule: json('rule').$type<Rule>().notNull(),
    /** the rule-set version this change produced */
    rulesetVersion: bigint('ruleset_version', { mode: 'number' }).notNull(),
  },
  (t) => [
    index('rule_history_rule_id_id_idx').on(t.ruleId, t.id),
    check('rule_history_action_known', sql`${t.action} in ('create', 'update', 'delete')`),
  ],
);

/**
 * The rule-set version: a single row (id = 1), created by the first write. Every write transaction
 * bumps it last, under its row lock, so versions are handed out in commit order and never go back.
 */
export const rulesetVersion = pgTable(
  'ruleset_version',
  {
    id: smallint('id').primaryKey().default(1),
    version: bigint('version', { mode: 'number' }).notNull(),
  },
  (t) => [check('ruleset_version_single_row', sql`${t.id} = 1`)],
);
