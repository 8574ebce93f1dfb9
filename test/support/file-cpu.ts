/**
 * Runs before every test file (vitest's setupFiles): records the CPU the file cost, for the
 * slowest-files report. On this 2-core machine the suite is CPU-bound, so a file's CPU, not its
 * wall time (which grows with whatever runs beside it), is what it takes from the budget.
 *
 * A file's CPU is its process's from just before the file is imported to its last hook: its
 * imports, its tests, and the child processes it started and waited for (the kernel adds a
 * child's CPU to its parent's once the child is reaped). PostgreSQL's share is not counted.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { afterAll, expect, inject } from 'vitest';

/** utime + stime + cutime + cstime of this process, in ms (fields 14-17 of /proc/self/stat). */
function cpuMs(): number | undefined {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = fields.slice(11, 15).reduce((sum, f) => sum + Number(f), 0);
    return ticks * 10;
  } catch {
    return undefined; // not Linux: the report shows wall time only
  }
}

/** vitest runs this file again before each test file, in a worker shared by several files too. */
const start = cpuMs();

afterAll(() => {
  const end = cpuMs();
  const path = expect.getState().testPath;
  if (start === undefined || end === undefined || !path) return;
  const line = { file: relative(process.cwd(), path), ms: end - start };
  appendFileSync(inject('fileCpuLog'), `${JSON.stringify(line)}\n`);
});
