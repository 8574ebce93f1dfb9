/**
 * Services on the machine that wake on their own and move the load average while a benchmark
 * runs, though the project does not use them.
 *
 * RabbitMQ is the one found so far. Its node checks epmd once a minute by starting a second
 * Erlang VM (`erl -sname epmd-starter-… -s erlang halt`), and that VM puts about fourteen
 * threads in the run queue at once. The kernel samples the load every 5 s and adds 0.08 per
 * runnable thread, so a sample that lands on it lifts the 1-minute load by about 1 in one step:
 * from 0.7 to past 1.5 with nothing of the benchmark's running. Pausing it (SIGSTOP) costs
 * nothing and spawns nothing; SIGCONT resumes it where it was.
 */
import { readdirSync, readFileSync } from 'node:fs';

const NOISY: Record<string, string> = {
  'beam.smp': 'RabbitMQ (it starts an Erlang VM every minute, a one-sample jump of about 1 in the load)',
};

export interface Neighbour {
  pid: number;
  name: string;
  why: string;
}

/** The noisy services running (not stopped) now; none where /proc cannot be read. */
export function noisyNeighbours(): Neighbour[] {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return []; // not Linux: nothing to say
  }
  const found: Neighbour[] = [];
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // gone since the listing
    }
    // "pid (comm) state …": comm may hold spaces and parentheses, so split at the last ')'.
    const close = stat.lastIndexOf(')');
    const name = stat.slice(stat.indexOf('(') + 1, close);
    const state = stat.slice(close + 2, close + 3);
    if (NOISY[name] && state !== 'T') found.push({ pid: Number(pid), name, why: NOISY[name] });
  }
  return found;
}

/** One line per noisy service, with the commands that pause and resume it. */
export function neighbourWarnings(found = noisyNeighbours()): string[] {
  return found.map(
    (n) =>
      `bench: ${n.why} is running as pid ${n.pid}: pause it for the run with \`kill -STOP ${n.pid}\`, ` +
      `resume it after with \`kill -CONT ${n.pid}\``,
  );
}
