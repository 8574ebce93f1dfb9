#!/usr/bin/env node
/** `webhook-inbox`, the operator's command line (the package's `bin`); the commands live in src/cli/. */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { EXIT } from './cli/command.js';
import { main } from './cli/main.js';

export { EXIT } from './cli/command.js';
export { main } from './cli/main.js';

// Run when executed (the package's bin, `node dist/src/cli.js`, `tsx src/cli.ts`), not when imported.
const invokedDirectly = (() => {
  try {
    return !!process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
  } catch {
    return false;
  }
})();

if (invokedDirectly) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      process.stderr.write(`webhook-inbox: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = EXIT.failure;
    },
  );
}
