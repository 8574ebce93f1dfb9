import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { build } from 'esbuild';
import type { TestProject } from 'vitest/node';
import { CHILD_SCRIPTS } from './child-scripts.js';
import { fileCpuLog } from './slowest-reporter.js';

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string | null;
    redisUrl: string | null;
    pgliteTemplate: string;
    childScripts: Record<string, string>;
    fileCpuLog: string;
  }
}

/**
 * A new PGlite runs initdb in WebAssembly: about 3 s of CPU, paid by every test database the
 * suite opens. The cluster initdb makes is the same every time, so it is made once per run and
 * each test's PGlite starts from a copy of it (loadDataDir: about 1 s). The copy is a whole,
 * fresh cluster: nothing of one test's database reaches another's.
 */
async function pgliteTemplate(): Promise<string> {
  const db = new PGlite();
  await db.waitReady;
  const dump = await db.dumpDataDir('none');
  await db.close();
  mkdirSync('.tmp', { recursive: true });
  const path = resolve(`.tmp/pglite-template-${process.pid}.tar`);
  writeFileSync(path, Buffer.from(await dump.arrayBuffer()));
  return path;
}

/** Each script of CHILD_SCRIPTS bundled into a directory of this run (see child-scripts.ts). */
async function childScripts(): Promise<{ dir: string; bundles: Record<string, string> }> {
  const dir = resolve(`.tmp/child-scripts-${process.pid}`);
  const bundles: Record<string, string> = {};
  await Promise.all(
    CHILD_SCRIPTS.map(async (script) => {
      const outfile = resolve(dir, script.replace(/\.ts$/, '.mjs'));
      await build({
        entryPoints: [script],
        bundle: true,
        platform: 'node',
        format: 'esm',
        packages: 'external',
        outfile,
        logLevel: 'error',
      });
      bundles[script] = outfile;
    }),
  );
  return { dir, bundles };
}

function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 1000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/**
 * Finds the real servers: DATABASE_URL / REDIS_URL, or a server answering on 127.0.0.1.
 * With WEBHOOK_INBOX_REQUIRE_SERVERS=1 (set by .ci/run) a missing server fails the run
 * instead of quietly leaving the suites to PGlite.
 */
export default async function setup(project: TestProject) {
  const template = await pgliteTemplate();
  project.provide('pgliteTemplate', template);
  const children = await childScripts();
  project.provide('childScripts', children.bundles);
  project.provide('fileCpuLog', fileCpuLog);
  const scratch = [template, children.dir];
  if (process.env.WEBHOOK_INBOX_SERVERS === 'none') {
    // As on a machine with only Node: PGlite, no servers (what `npm install && npm test` meets there).
    console.log('webhook-inbox tests: PGlite (embedded) only, WEBHOOK_INBOX_SERVERS=none');
    project.provide('postgresUrl', null);
    project.provide('redisUrl', null);
    return removeScratch(scratch);
  }
  const pg =
    process.env.DATABASE_URL ||
    ((await answers('127.0.0.1', 5432)) ? 'postgres://postgres@127.0.0.1:5432/test' : null);
  const redis =
    process.env.REDIS_URL || ((await answers('127.0.0.1', 6379)) ? 'redis://127.0.0.1:6379' : null);
  if (process.env.WEBHOOK_INBOX_REQUIRE_SERVERS === '1' && (!pg || !redis)) {
    throw new Error(`WEBHOOK_INBOX_REQUIRE_SERVERS=1 but ${!pg ? 'PostgreSQL' : 'Redis'} is not reachable`);
  }
  console.log(
    `webhook-inbox tests: PGlite (embedded) always; PostgreSQL ${pg ? `at ${pg.replace(/\/\/[^@]*@/, '//')}` : 'NOT available: real-Postgres suites skipped'}; Redis ${redis ?? 'NOT available'}`,
  );
  project.provide('postgresUrl', pg);
  project.provide('redisUrl', redis);
  return removeScratch(scratch);
}

/** The teardown vitest runs after every file: the template and the bundles go with the run. */
function removeScratch(paths: string[]): () => void {
  return () => {
    for (const path of paths) rmSync(path, { recursive: true, force: true });
  };
}
