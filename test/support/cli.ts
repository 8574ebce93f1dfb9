/**
 * The `webhook-inbox` CLI, two ways:
 * - `cli()`: its entry (`main` of src/cli/main.ts, what src/cli.ts runs) in this process, with
 *   the environment it is given and its output captured line by line, exactly as the process
 *   writes it. Most commands are checked this way: a Node start and a module load per command
 *   were most of the CLI suites' CPU (about 0.5 s each, and some hundred commands).
 * - `cliProcess()`: as an operator runs it, its own process. src/cli.ts is bundled once per test
 *   file (esbuild, the compiler tsx uses; packages stay external) so that each run costs a Node
 *   start, not a TypeScript compile. Kept for what only a process shows: the exit status the
 *   shell sees, the bytes that reach a terminal, a prompt on a pseudo-terminal.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { build } from 'esbuild';
import { afterAll, beforeAll } from 'vitest';
import { EXIT, main } from '../../src/cli.js';
import { postgresUrl } from './databases.js';

export interface Run {
  code: number;
  stdout: string;
  /** stdout as bytes, exactly as written (`dead show --raw`). */
  bytes: Buffer;
  stderr: string;
  /** stdout parsed as JSON, when it is JSON. */
  json: any;
}

export const postgresUrlOrEmpty = postgresUrl ?? '';
export const DB_ENV = { DATABASE_URL: postgresUrlOrEmpty };

/** The bytes written to stdout and stderr, as a Run (what a process would have printed). */
function captured(code: number, stdout: Buffer[], stderr: string[]): Run {
  const bytes = Buffer.concat(stdout);
  const text = bytes.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { code, stdout: text, bytes, stderr: stderr.join(''), json };
}

/**
 * One command line through the CLI's entry in this process: the environment is this process's
 * with `env` over it (as a child's would be), stdin is no terminal, and an error that escapes
 * `main` is printed and exits 1, as src/cli.ts does.
 */
export async function cli(argv: string[], env: Record<string, string | undefined> = DB_ENV): Promise<Run> {
  const stdout: Buffer[] = [];
  const stderr: string[] = [];
  const code = await main(
    argv,
    { ...process.env, ...env },
    {
      stdout: (text) => stdout.push(Buffer.from(`${text}\n`)),
      stderr: (text) => stderr.push(`${text}\n`),
      raw: (bytes) => stdout.push(Buffer.from(bytes)),
    },
  ).catch((err: unknown) => {
    stderr.push(`webhook-inbox: ${err instanceof Error ? err.message : String(err)}\n`);
    return EXIT.failure;
  });
  return captured(code, stdout, stderr);
}

export function run(command: string, argv: string[], env: Record<string, string | undefined>): Promise<Run> {
  return new Promise((done) => {
    execFile(
      command,
      argv,
      { env: { ...process.env, ...env }, encoding: 'buffer', maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? Number((err as { code?: unknown }).code ?? 1) : 0;
        done(captured(code, [stdout], [stderr.toString('utf8')]));
      },
    );
  });
}

/**
 * Registers the bundle's build and removal for this test file; returns the path of the bundle
 * (valid once the file's beforeAll ran) and a runner for it.
 */
export function cliProcess(): {
  bundle(): string;
  cli(args: string[], env?: Record<string, string | undefined>): Promise<Run>;
} {
  let bundle = '';
  beforeAll(async () => {
    mkdirSync('.tmp', { recursive: true });
    bundle = resolve(`.tmp/webhook-inbox-cli-${process.pid}-${Math.random().toString(36).slice(2)}.mjs`);
    await build({
      entryPoints: ['src/cli.ts'],
      bundle: true,
      platform: 'node',
      format: 'esm',
      packages: 'external',
      outfile: bundle,
      logLevel: 'error',
    });
  });
  afterAll(() => rmSync(bundle, { force: true }));
  return {
    bundle: () => bundle,
    cli: (args, env = DB_ENV) => run(process.execPath, [bundle, ...args], env),
  };
}
