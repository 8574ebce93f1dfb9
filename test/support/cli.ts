/**
 * The `webhook-inbox` CLI as an operator runs it: its own process. src/cli.ts is bundled once
 * per test file (esbuild, the compiler tsx uses; packages stay external) so that each run costs
 * a Node start, not a TypeScript compile: ~0.5 s of CPU instead of ~2 s.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { build } from 'esbuild';
import { afterAll, beforeAll } from 'vitest';
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

export function run(command: string, argv: string[], env: Record<string, string | undefined>): Promise<Run> {
  return new Promise((done) => {
    execFile(
      command,
      argv,
      { env: { ...process.env, ...env }, encoding: 'buffer', maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const text = stdout.toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const code = err ? Number((err as { code?: unknown }).code ?? 1) : 0;
        done({ code, stdout: text, bytes: stdout, stderr: stderr.toString('utf8'), json });
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
