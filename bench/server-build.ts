/**
 * The contenders' servers run compiled by tsc (tsconfig.bench.json), as the package ships, not
 * through tsx: its transpiler keeps function names by wrapping every function expression in a
 * call (`__name`), paid each time a closure is created, which the published JavaScript never
 * pays. bench/run.ts and bench/server-cost.ts build them once, before the first server starts.
 */
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Where the compiled servers are: `bench/server.js` in it is a contender's process. */
export const serverBuild = join(root, '.tmp', 'bench-build');

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
