/**
 * Keeps the suite's budget in sight: after every run, the slowest test files (and, with
 * WEBHOOK_INBOX_TEST_PROFILE=N, the N slowest files and the N slowest tests) with their wall
 * time, next to the run's own. `npm run test:profile` is the long form.
 *
 * A file's time is from its first hook to its last (import and collection included), as it
 * held a worker; files run side by side, so the times add up to more than the run took.
 */
import type { Reporter, TestModule } from 'vitest/node';

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`.padStart(8);

export default class SlowestReporter implements Reporter {
  #started = performance.now();

  onTestRunStart(): void {
    this.#started = performance.now();
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const profile = Number(process.env.WEBHOOK_INBOX_TEST_PROFILE ?? 0);
    const top = Number.isInteger(profile) && profile > 0 ? profile : 10;
    const files = modules
      .map((m) => {
        const d = m.diagnostic();
        return {
          name: m.relativeModuleId,
          ms: d.duration + d.collectDuration + d.prepareDuration + d.setupDuration,
          tests: [...m.children.allTests()].length,
        };
      })
      .sort((a, b) => b.ms - a.ms);
    const lines = [
      '',
      `webhook-inbox tests: ${files.length} files in ${seconds(performance.now() - this.#started).trim()} wall; the ${Math.min(top, files.length)} slowest files:`,
      ...files.slice(0, top).map((f) => `${seconds(f.ms)}  ${f.name} (${f.tests} tests)`),
    ];
    if (profile > 0) {
      const tests = modules
        .flatMap((m) =>
          [...m.children.allTests()].map((t) => ({
            name: `${m.relativeModuleId} > ${t.fullName}`,
            ms: t.diagnostic()?.duration ?? 0,
          })),
        )
        .sort((a, b) => b.ms - a.ms);
      lines.push(
        `the ${Math.min(top, tests.length)} slowest tests:`,
        ...tests.slice(0, top).map((t) => `${seconds(t.ms)}  ${t.name}`),
      );
    }
    console.log(lines.join('\n'));
  }
}
