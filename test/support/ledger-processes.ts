/** The test's side of `ledger-process.ts`: start, talk to, and kill app instances in processes. */
import { type ChildProcess, fork } from 'node:child_process';
import type { SweepReport } from '../../src/index.js';
import { childScript } from './child-scripts.js';
import type { LedgerProcessConfig } from './ledger-process.js';

export interface LedgerProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** Resolves with the id of the event whose handler reached the gate. */
  readonly gate: Promise<string>;
  /** Waits until the process's drains in flight are done. */
  idle(): Promise<void>;
  /** One sweeper pass in the process, and its drains. */
  sweep(): Promise<SweepReport>;
  /** SIGKILL, and resolves once the process is gone. */
  kill(): Promise<void>;
  /** Disconnects: the process closes its inbox and exits. */
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();

/** Kills whatever a failed test left running. */
export async function killAll(): Promise<void> {
  await Promise.all(
    [...running].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}

export async function startLedgerProcess(config: LedgerProcessConfig): Promise<LedgerProcess> {
  const child = fork(childScript('test/support/ledger-process.ts'), [JSON.stringify(config)], {
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  running.add(child);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );
  let onGate!: (id: string) => void;
  const gate = new Promise<string>((resolve) => {
    onGate = resolve;
  });
  const waiting = new Map<string, (message: any) => void>();
  child.on('message', (message: any) => {
    if (message.type === 'gate') onGate(message.id);
    if (message.type === 'done') {
      waiting.get(message.of)?.(message);
      waiting.delete(message.of);
    }
  });
  const ask = (of: string) =>
    new Promise<any>((resolve, reject) => {
      waiting.set(of, resolve);
      child.send({ type: of }, (err) => err && reject(err));
    });

  const url = await new Promise<string>((resolve, reject) => {
    child.on('message', (message: any) => message.type === 'ready' && resolve(message.url));
    child.once('exit', (code, signal) =>
      reject(new Error(`ledger process exited before it was ready (${code ?? signal})`)),
    );
  });
  return {
    url,
    child,
    gate,
    idle: async () => {
      await ask('idle');
    },
    sweep: async () => (await ask('sweep')).report,
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
    stop: async () => {
      child.disconnect();
      await exited;
    },
  };
}
