/**
 * A contender's server process (bench/server.ts), as bench/run.ts
 * start and talk to it.
 *
 * The servers run compiled by tsc (tsconfig.bench.json), as the package ships, not through
 * tsx: its transpiler keeps function names by wrapping every function expression in a call
 * (`__name`), paid each time a closure is created, which the published JavaScript never pays.
 * Built once per run, before the first server starts.
 */
import { type ChildProcess, execFileSync, type ForkOptions, fork } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ContenderConfig } from './contenders.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const serverBuild = join(root, '.tmp', 'bench-build');

let built = false;
export function buildServers(): void {
  if (built) return;
  execFileSync(
    process.execPath,
    [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.bench.json')],
    { stdio: 'inherit' },
  );
  built = true;
}

export interface Server {
  port: number;
  child: ChildProcess;
  /** One IPC command (bench/server.ts lists them) and its answer. */
  call<T = any>(cmd: string, extra?: object): Promise<T>;
}

/**
 * Builds the servers if need be, forks one (`options` choose the runtime: Node's flags, or
 * valgrind as `execPath`), runs `started` on the child at once (e.g. to pin it to a core), and
 * resolves when it is ready. A call still waiting when the process exits is rejected.
 */
export async function forkServer(
  config: ContenderConfig,
  options: ForkOptions,
  started?: (child: ChildProcess) => void,
): Promise<Server> {
  buildServers();
  const child = fork(join(serverBuild, 'bench', 'server.js'), [JSON.stringify(config)], {
    stdio: 'inherit',
    ...options,
  });
  started?.(child);
  let nextId = 0;
  const waiting = new Map<number, { resolve(v: any): void; reject(e: Error): void }>();
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) =>
      reject(new Error(`${config.contender} server exited (${code}) before it was ready`)),
    );
    child.on('message', (m: any) => {
      if (m.type === 'ready') resolve(m.port);
      else if (waiting.has(m.id)) {
        const w = waiting.get(m.id)!;
        waiting.delete(m.id);
        if (m.error) w.reject(new Error(m.error));
        else w.resolve(m.value);
      }
    });
  });
  child.removeAllListeners('exit');
  child.on('exit', () => {
    for (const w of waiting.values()) w.reject(new Error(`${config.contender} server exited`));
  });
  return {
    port,
    child,
    call<T>(cmd: string, extra: object = {}) {
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        child.send({ id, cmd, ...extra });
      });
    },
  };
}
