-- Custom migration (drizzle-kit generate --custom): fills the new `definition` column from the columns
-- of 0000 before 0003 drops them. A rule's definition is the rule as written, with defaults, in the order
-- the API has always returned it: json_build_object keeps argument order in `json` (jsonb would not),
-- and json_strip_nulls leaves out what a rule did not have (description, match.methods, match.host,
-- client.name); a v1 rule has no other null.
UPDATE "rules" SET "definition" = json_strip_nulls(json_build_object(
	'name', "name",
	'description', "description",
	'match', json_build_object('path', "match" -> 'path', 'methods', "match" -> 'methods', 'host', "match" -> 'host'),
	'client', json_build_object('by', "client" -> 'by', 'name', "client" -> 'name'),
	'limit', json_build_object('capacity', "limit" -> 'capacity', 'refill', "limit" -> 'refill', 'period', "limit" -> 'period'),
	'cost', "cost",
	'maxDebt', "max_debt",
	'enabled', "enabled",
	'shadow', "shadow",
	'priority', "priority"
));
