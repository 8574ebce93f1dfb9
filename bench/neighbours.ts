/**
 * Services on the machine that wake on their own and move the load average while a benchmark
 * runs, though the project does not use them.
 *
 * RabbitMQ is the one found so far. Once a minute its node starts a second Erlang VM
 * (`erl -sname epmd-starter-… -s erlang halt`, named for starting epmd), and that VM put 13 to
 * 15 threads in the run queue at once, counted 10 times a second. The kernel samples the load
 * every 5 s and adds 0.08 per runnable thread, so a sample that lands on it lifts the 1-minute
 * load by about 1 in one step. Pausing RabbitMQ (SIGSTOP) costs nothing and spawns nothing;
 * SIGCONT resumes it where it was.
 */
import { pidsNamed, statFields } from './process-cpu.js';

const NOISY: Record<string, string> = {
  'beam.smp': 'RabbitMQ (it starts an Erlang VM every minute, a one-sample jump of about 1 in the load)',
};

export interface Neighbour {
  pid: number;
  name: string;
  why: string;
}

/** The noisy services running (not stopped: state T) now; none where /proc cannot be read. */
export function noisyNeighbours(): Neighbour[] {
  const found: Neighbour[] = [];
  for (const [name, why] of Object.entries(NOISY)) {
    for (const pid of pidsNamed(name)) {
      const state = statFields(pid)?.[0];
      if (state !== undefined && state !== 'T') found.push({ pid, name, why });
    }
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
