/**
 * Keeps the suite's budget in sight: after every run, the test files that cost the most CPU
 * (and, with WEBHOOK_INBOX_TEST_PROFILE=N, the N costliest files and the N slowest tests), with
 * their CPU and wall time, next to the run's own. `npm run test:profile` is the long form.
 *
 * The suite is CPU-bound on a 2-core machine, so files are ranked by CPU (file-cpu.ts records
 * it: the file's process and the children it reaped; PostgreSQL's share is not in it). A file's
 * wall time is from its first hook to its last, as it held a worker; files run side by side, so
 * wall times add up to more than the run took, and grow with whatever ran beside them.
 */
import { readFileSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

/** Where file-cpu.ts appends `{ file, ms }` lines: one log per run (the main process's pid). */
export const fileCpuLog = resolve(`.tmp/file-cpu-${process.pid}.jsonl`);

function cpuByFile(): Map<string, number> {
  const cpu = new Map<string, number>();
  let text = '';
  try {
    text = readFileSync(fileCpuLog, 'utf8');
  } catch {
    return cpu;
  }
  rmSync(fileCpuLog, { force: true });
  for (const line of text.split('\n').filter(Boolean)) {
    const { file, ms } = JSON.parse(line) as { file: string; ms: number };
    cpu.set(file, ms);
  }
  return cpu;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`.padStart(8);

export default class SlowestReporter implements Reporter {
  #started = performance.now();

  onTestRunStart(): void {
    this.#started = performance.now();
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const profile = Number(process.env.WEBHOOK_INBOX_TEST_PROFILE ?? 0);
    const top = Number.isInteger(profile) && profile > 0 ? profile : 10;
    const cpu = cpuByFile();
    const files = modules
      .map((m) => {
        const d = m.diagnostic();
        return {
          name: m.relativeModuleId,
          ms: d.duration + d.collectDuration + d.prepareDuration + d.setupDuration,
          cpu: cpu.get(m.relativeModuleId),
          tests: [...m.children.allTests()].length,
        };
      })
      .sort((a, b) => (b.cpu ?? b.ms) - (a.cpu ?? a.ms));
    const total = [...cpu.values()].reduce((sum, ms) => sum + ms, 0);
    const lines = [
      '',
      `webhook-inbox tests: ${files.length} files in ${seconds(performance.now() - this.#started).trim()} wall` +
        (cpu.size ? `, ${seconds(total).trim()} of CPU in test processes` : '') +
        `; the ${Math.min(top, files.length)} costliest files (CPU, wall):`,
      ...files
        .slice(0, top)
        .map(
          (f) =>
            `${f.cpu === undefined ? '       -' : seconds(f.cpu)}${seconds(f.ms)}  ${f.name} (${f.tests} tests)`,
        ),
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
