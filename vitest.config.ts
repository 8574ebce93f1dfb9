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

/**
 * Files that change what the whole process shares, or assert on it: process warnings emitted
 * once per process, environment variables set at import, faked clocks. Each runs in a process of
 * its own. Every other file runs in a worker that several files share, one after another (vitest's
 * `isolate: false`): the modules are loaded once per worker instead of once per file, which was
 * about 0.6 s of CPU a file. A file added here says why in its own header.
 */
const OWN_PROCESS = [
  'test/adapters-mount-cleanly.test.ts',
  'test/console-security.test.ts',
  'test/example-nextjs-route.test.ts',
  'test/loud-by-default.test.ts',
  'test/no-silent-data-loss.test.ts',
  'test/providers.test.ts',
  'test/retention-prunes-processed-events.test.ts',
  'test/sender-retry-budget.test.ts',
];

export default defineConfig({
  // `webhook-inbox/…` in examples/ (what a user's code imports) is the sources, by tsconfig.json's paths.
  resolve: { tsconfigPaths: true },
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/file-cpu.ts', 'test/support/inboxes-closed.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: 'forks',
    maxWorkers: workers,
    reporters: ['default', './test/support/slowest-reporter.ts'],
    projects: release
      ? [{ extends: true, test: { name: 'release', include: RELEASE_TIER } }]
      : [
          { extends: true, test: { name: 'own-process', include: OWN_PROCESS } },
          {
            extends: true,
            test: {
              name: 'shared',
              include: ['test/**/*.test.ts'],
              exclude: [...RELEASE_TIER, ...OWN_PROCESS, 'test/citus/**'],
              isolate: false,
            },
          },
        ],
  },
});
