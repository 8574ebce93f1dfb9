import { defineConfig } from 'vitest/config';

/**
 * `npm run test:citus`: the inbox on a Citus cluster (docs/citus.md), a coordinator and two workers
 * started by shared/citus/cluster.sh (test/citus/global-setup.ts). A cluster that cannot start fails
 * the tier; nothing in it is skipped.
 */
export default defineConfig({
  resolve: { tsconfigPaths: true },
  test: {
    include: ['test/citus/**/*.test.ts'],
    globalSetup: ['test/citus/global-setup.ts'],
    setupFiles: ['test/support/inboxes-closed.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
  },
});
