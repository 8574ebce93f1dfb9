/**
 * The TypeScript files the suite runs as processes of their own (an app instance to SIGKILL, a
 * worker, a sender, the ledger example as a user starts it), compiled once per run.
 *
 * Under `node --import tsx` each start compiled the script and every module it imports again:
 * about 2 s of CPU per process, and the suite starts some forty. global-setup.ts bundles each
 * script once with esbuild (the compiler tsx uses; packages stay external, so the process loads
 * the same node_modules) and a test starts `node <bundle>`: about 0.5 s. The code that runs is
 * the same source, compiled the same way.
 */
import { resolve } from 'node:path';
import { inject } from 'vitest';

/** Every script a test starts as a process; global-setup.ts bundles exactly these. */
export const CHILD_SCRIPTS = [
  'examples/ledger/server.ts',
  'test/support/ledger-process.ts',
  'test/support/deferred-worker.ts',
  'test/support/outbox-sender-child.ts',
] as const;

export type ChildScript = (typeof CHILD_SCRIPTS)[number];

/** The argv that starts `script` with `process.execPath`: its bundle's path. */
export function childScript(script: ChildScript): string {
  const bundles = inject('childScripts');
  const bundle = bundles[script];
  if (!bundle)
    throw new Error(`${script} is not bundled: add it to CHILD_SCRIPTS in test/support/child-scripts.ts`);
  return resolve(bundle);
}
