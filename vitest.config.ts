import { defineConfig } from 'vitest/config';

// CI reads .vitest-results.json to print its `N passed, N failed` line.
export default defineConfig({
  test: {
    projects: ['packages/*', 'apps/*'],
    reporters: process.env.CI ? ['default', 'json'] : ['default'],
    outputFile: { json: '.vitest-results.json' },
  },
});
