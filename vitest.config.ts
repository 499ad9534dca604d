import { defineConfig } from 'vitest/config';

export default defineConfig({
  // `idem` and `idem/*` resolve to src through tsconfig's paths, as the README examples import them.
  resolve: { tsconfigPaths: true },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // 2 cores: two files at once. Each file has its own schema, so they never collide; more
    // workers only made the timing-sensitive tests (child processes, latency bounds) flaky.
    maxWorkers: 2,
    // Generous: PGlite (WASM) and child processes that compile TypeScript start slowly on 2 cores.
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
