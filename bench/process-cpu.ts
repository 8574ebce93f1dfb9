/**
 * Processes' CPU time, read from /proc, for the benches that split a delivery's cost between
 * the Node process and PostgreSQL (bench/run.ts, bench/wire-cost.ts, bench/retention.ts).
 */
import { readdirSync, readFileSync } from 'node:fs';

const TICK_MS = 1000 / 100; // USER_HZ: /proc/<pid>/stat counts in 1/100 s on Linux

/** User + system CPU of one process, in ms (0 when it is gone). */
export function processCpuMs(pid: number): number {
  try {
    // The name may hold spaces and parentheses: the fields are split after the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS; // utime, stime
  } catch {
    return 0;
  }
}

/** CPU of every `postgres` process, ms, by pid: a backend that exits later cannot lower the sum. */
export function postgresCpuMs(): Map<number, number> {
  const byPid = new Map<number, number>();
  let entries: string[] = [];
  try {
    entries = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {}
  for (const entry of entries) {
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres')
        byPid.set(Number(entry), processCpuMs(Number(entry)));
    } catch {} // gone since the listing
  }
  return byPid;
}

/** The CPU the `postgres` processes alive now used since `before` (a new one: all of its own), in ms. */
export function postgresCpuMsSince(before: Map<number, number>): number {
  let used = 0;
  for (const [pid, ms] of postgresCpuMs()) used += Math.max(0, ms - (before.get(pid) ?? 0));
  return used;
}
