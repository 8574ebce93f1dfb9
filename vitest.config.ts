import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

/**
 * Test files run side by side: most of their time is spent waiting on PostgreSQL, Redis, child
 * processes and sockets, not on this process's CPU, so twice the cores keeps a 2-core machine
 * busy without starving it (vitest's default would be one file at a time there). Every file is
 * isolated: its own schemas (test/support/databases.ts), its own PGlite, ports chosen by the
 * kernel, private servers for the fault tests. WEBHOOK_INBOX_TEST_WORKERS sets another count.
 */
const workers = Number(process.env.WEBHOOK_INBOX_TEST_WORKERS ?? Math.max(2, availableParallelism() * 2));
if (!Number.isInteger(workers) || workers < 1) {
  throw new Error(
    `WEBHOOK_INBOX_TEST_WORKERS must be a whole number >= 1; got ${process.env.WEBHOOK_INBOX_TEST_WORKERS}`,
  );
}

/**
 * The release tier, `npm run test:package`: the package as a user installs it (a build, `npm
 * pack`, two installs into scratch projects, every framework's consumer type-checked and run).
 * It is most of a minute of CPU that no change short of the build's or the exports' needs, so
 * `npm test` leaves it to this tier and CI runs both.
 */
const RELEASE_TIER = ['test/package.test.ts'];
const release = process.env.WEBHOOK_INBOX_TEST_TIER === 'release';

export default defineConfig({
  test: {
    include: release ? RELEASE_TIER : ['test/**/*.test.ts'],
    exclude: release ? [] : RELEASE_TIER,
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/file-cpu.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: 'forks',
    maxWorkers: workers,
    reporters: ['default', './test/support/slowest-reporter.ts'],
  },
});
