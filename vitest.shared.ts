import { defineConfig } from 'vitest/config';

// Tests run on the TypeScript sources of workspace packages (the `sluice-source` export
// condition), so `pnpm test` needs no build first.
export default defineConfig({
  resolve: { conditions: ['sluice-source', 'module', 'node', 'default'] },
  ssr: { resolve: { conditions: ['sluice-source', 'node', 'default'] } },
  test: {
    environment: 'node',
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
