/**
 * Processes and their CPU time, read from /proc, for the benches that split a delivery's cost
 * between the Node process and PostgreSQL (bench/run.ts, bench/wire-cost.ts): CPU per
 * delivery moves far less than throughput when the machine is busy.
 */
import { readdirSync, readFileSync } from 'node:fs';

const TICK_MS = 1000 / 100; // USER_HZ: /proc/<pid>/stat counts in 1/100 s on Linux

/**
 * The fields of /proc/<pid>/stat after the name, from the state on (`fields[0]` is the state,
 * `fields[11]` utime), or undefined when the process is gone. The name may hold spaces and
 * parentheses, so the split is at the last ')'.
 */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** User + system CPU of one process, in ms (0 when it is gone). */
export function processCpuMs(pid: number): number {
  const fields = statFields(pid);
  return fields ? (Number(fields[11]) + Number(fields[12])) * TICK_MS : 0; // utime, stime
}

/** The pids of the processes whose name (/proc/<pid>/comm) is `name`; none without /proc. */
function pidsNamed(name: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) pids.push(Number(entry));
    } catch {
      // gone since the listing
    }
  }
  return pids;
}

/**
 * CPU of every process named `postgres` (the backends of all pools, and the server's own), in
 * ms, by pid: compared with `postgresCpuMsSince`, so that a process that exits meanwhile (a
 * pool's backend closing after its server stopped, the vacuum's connection) does not take the
 * CPU it had used before the measurement out of the sum. A plain total did, and a PGlite cell,
 * which uses no PostgreSQL, once read -82 µs/req.
 */
export function postgresCpuMs(): Map<number, number> {
  const byPid = new Map<number, number>();
  for (const pid of pidsNamed('postgres')) byPid.set(pid, processCpuMs(pid));
  return byPid;
}

/** The CPU the `postgres` processes alive now used since `before` (a new one: all of its own), in ms. */
export function postgresCpuMsSince(before: Map<number, number>): number {
  const { backends, helpers } = postgresCpuSplitSince(before);
  return backends + helpers;
}

/**
 * `postgresCpuMsSince`, split between the client backends (the statements' own work, and the
 * WAL each flushes at its COMMIT) and the server's helpers (WAL writer, checkpointer, background
 * writer, launchers): whether a bench's PostgreSQL figure is its statements or housekeeping.
 */
export function postgresCpuSplitSince(before: Map<number, number>): { backends: number; helpers: number } {
  let backends = 0;
  let helpers = 0;
  for (const [pid, ms] of postgresCpuMs()) {
    const used = Math.max(0, ms - (before.get(pid) ?? 0));
    if (isClientBackend(pid)) backends += used;
    else helpers += used;
  }
  return { backends, helpers };
}

/**
 * A client backend's title names its client: `postgres: 15/main: user db 127.0.0.1(5432) idle`,
 * or `[local]` over a Unix socket; a helper's names its job (`postgres: 15/main: walwriter`).
 * A parallel query's workers would count as helpers: none of the benches' statements uses one.
 */
function isClientBackend(pid: number): boolean {
  try {
    return /\(\d+\)|\[local\]/.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return false;
  }
}
