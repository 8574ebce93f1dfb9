/**
 * A bench's server in a process of its own: forked, ready when it says so, then asked over IPC
 * (`{ id, cmd }`, answered `{ id, value }` or `{ id, error }`). The contenders' servers and the
 * ledger example run compiled by tsc (tsconfig.bench.json) as the package ships: tsx wraps every
 * function expression in a call to keep its name, which the published JavaScript never pays.
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ContenderConfig } from './contenders.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');

/** Runs on the child at once, before it is ready (to pin it to a core, say). */
type Started = (child: ChildProcess) => void;

export interface Forked {
  child: ChildProcess;
  /** Its `{ type: 'ready' }` message (a contender's `port`; the ledger's `url` and `options`). */
  ready: any;
  /** One command and its answer; rejected if the process exits first. */
  call<T = any>(cmd: string, extra?: object): Promise<T>;
  /** Sends `close`, and resolves once the process has exited. */
  close(): Promise<void>;
}

/** Forks `script` (by default bench/ledger-process.ts, compiled), ready on its `ready` message. */
export function forkReady(
  args: string[],
  options: { script?: string; execArgv?: string[]; started?: Started; name?: string } = {},
): Promise<Forked> {
  const { script = compiled('ledger-process'), name = basename(script) } = options;
  const child = fork(script, args, {
    stdio: 'inherit',
    execArgv: options.execArgv ?? (script.endsWith('.ts') ? ['--import', 'tsx'] : []),
  });
  options.started?.(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let nextId = 0;
  const waiting = new Map<number, { resolve(v: any): void; reject(e: Error): void }>();
  const call = <T>(cmd: string, extra: object = {}) =>
    new Promise<T>((resolve, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve, reject });
      child.send({ id, cmd, ...extra });
    });
  const close = () => {
    call('close').catch(() => {});
    return exited;
  };
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      reject(new Error(`${name} exited (${code}) before it was ready`));
      for (const w of waiting.values()) w.reject(new Error(`${name} exited`));
    });
    child.on('message', (m: any) => {
      if (m.type === 'ready') resolve({ child, ready: m, call, close });
      const w = typeof m.id === 'number' ? waiting.get(m.id) : undefined;
      if (!w) return;
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m.value);
    });
  });
}

let built = false;

/** A bench server's JavaScript (tsconfig.bench.json, built once per run). */
function compiled(name: string): string {
  if (!built) {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.bench.json')], { stdio: 'inherit' });
    built = true;
  }
  return join(root, '.tmp', 'bench-build', 'bench', `${name}.js`);
}

export type Server = Forked & { port: number };

/** A contender's server (bench/server.ts), ready on `port`. */
export async function forkServer(config: ContenderConfig, started?: Started): Promise<Server> {
  const script = compiled('server');
  const options = { script, execArgv: ['--expose-gc'], started, name: `${config.contender} server` };
  const server = await forkReady([JSON.stringify(config)], options);
  return { ...server, port: server.ready.port };
}
