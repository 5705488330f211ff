ALTER TABLE "rule_history" ALTER COLUMN "rule" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "rules" ALTER COLUMN "definition" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "description";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "match";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "client";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "limit";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "cost";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "max_debt";--> statement-breakpoint
ALTER TABLE "rules" DROP COLUMN "shadow";