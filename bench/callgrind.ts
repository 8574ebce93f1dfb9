/**
 * Reading callgrind's dumps, for the instruction counts of bench/server-cost.ts (the
 * contender's server) and bench/postgres-cost.ts with INSTRUCTIONS (PostgreSQL's backends).
 * Both run their process with `--callgrind-out-file=<dir>/cg.%p` and a function that dumps the
 * counters when called; each dump is `cg.<pid>.<n>`, or `cg.<pid>.<n>-<thread>` with
 * `--separate-threads=yes`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The instructions counted in the newest dump of `pid` (of its `thread`, "01" being the main
 * thread, when the process ran with `--separate-threads=yes`): those since its counters were
 * last zeroed.
 */
export function newestDumpInstructions(dir: string, pid: number, thread?: string): number {
  const name = new RegExp(`^cg\\.${pid}\\.(\\d+)${thread ? `-${thread}` : ''}$`);
  const dumps = readdirSync(dir)
    .map((f) => ({ f, n: Number(name.exec(f)?.[1] ?? Number.NaN) }))
    .filter((d) => !Number.isNaN(d.n))
    .sort((a, b) => a.n - b.n);
  const newest = dumps.at(-1)?.f;
  if (!newest)
    throw new Error(
      `no callgrind dump of process ${pid} in ${dir}: is it running under callgrind, dumping on the marker?`,
    );
  const summary = /^summary: (\d+)$/m.exec(readFileSync(join(dir, newest), 'utf8'));
  if (!summary) throw new Error(`callgrind dump ${newest} has no summary line`);
  return Number(summary[1]);
}
