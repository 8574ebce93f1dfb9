import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    citusUrl: string;
  }
}

/**
 * The cluster script: WEBHOOK_INBOX_CITUS_SCRIPT, else `shared/citus/cluster.sh` in the nearest
 * directory above the repository that has one (a worktree or a fresh clone beside `shared/`), else
 * the workplace's own `/work/shared` (a clone made elsewhere).
 */
function clusterScript(): string {
  const given = process.env.WEBHOOK_INBOX_CITUS_SCRIPT;
  if (given) return given;
  for (let dir = resolve(import.meta.dirname, '../..'); dir !== dirname(dir); dir = dirname(dir)) {
    const candidate = join(dirname(dir), 'shared/citus/cluster.sh');
    if (existsSync(candidate)) return candidate;
  }
  if (existsSync('/work/shared/citus/cluster.sh')) return '/work/shared/citus/cluster.sh';
  throw new Error(
    'the Citus tier found no shared/citus/cluster.sh above the repository: set WEBHOOK_INBOX_CITUS_SCRIPT to its path',
  );
}

/** Starts the cluster (idempotent) and hands its coordinator's URL to the tests; a cluster that cannot start fails the tier. */
export default function setup(project: TestProject): void {
  const script = clusterScript();
  const out = execFileSync('bash', [script, 'start'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = out.trim().split('\n').at(-1) ?? '';
  if (!url.startsWith('postgres://')) throw new Error(`${script} start printed no coordinator URL:\n${out}`);
  project.provide('citusUrl', url);
}
