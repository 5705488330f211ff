import { defineConfig } from 'drizzle-kit';

// `pnpm --filter @sluice/rules-api db:generate -- --name <what>` writes the next migration into the
// repository's `migrations/` folder (journal in `migrations/meta/`, committed).
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema.ts',
  out: '../../migrations',
});
