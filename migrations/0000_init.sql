CREATE TABLE "rule_history" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"rule_id" uuid NOT NULL,
	"version" integer NOT NULL,
	"action" text NOT NULL,
	"actor" text NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL,
	"rule" jsonb NOT NULL,
	"ruleset_version" bigint NOT NULL,
	CONSTRAINT "rule_history_action_known" CHECK ("rule_history"."action" in ('create', 'update', 'delete'))
);
--> statement-breakpoint
CREATE TABLE "rules" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"name" text COLLATE "C" NOT NULL,
	"description" text,
	"match" jsonb NOT NULL,
	"client" jsonb NOT NULL,
	"limit" jsonb NOT NULL,
	"cost" double precision NOT NULL,
	"max_debt" double precision NOT NULL,
	"enabled" boolean NOT NULL,
	"shadow" boolean NOT NULL,
	"priority" integer NOT NULL,
	"version" integer DEFAULT 1 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "rules_name_unique" UNIQUE("name"),
	CONSTRAINT "rules_version_positive" CHECK ("rules"."version" >= 1)
);
--> statement-breakpoint
CREATE TABLE "ruleset_version" (
	"id" smallint PRIMARY KEY DEFAULT 1 NOT NULL,
	"version" bigint NOT NULL,
	CONSTRAINT "ruleset_version_single_row" CHECK ("ruleset_version"."id" = 1)
);
--> statement-breakpoint
CREATE INDEX "rule_history_rule_id_id_idx" ON "rule_history" USING btree ("rule_id","id");