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

/** What the run provides to every test file. */
interface Provided {
  pgliteTemplate: string;
  childScripts: Record<string, string>;
  fileCpuLog: string;
  postgresUrl: string | null;
  redisUrl: string | null;
  /** Files and directories removed when the run ends. */
  scratch: string[];
}

/**
 * Finds the real servers: DATABASE_URL / REDIS_URL, or a server answering on 127.0.0.1.
 * With WEBHOOK_INBOX_REQUIRE_SERVERS=1 (set by .ci/run) a missing server fails the run
 * instead of quietly leaving the suites to PGlite.
 */
async function prepare(): Promise<Provided> {
  const pgliteTemplatePath = await pgliteTemplate();
  const children = await childScripts();
  const common = {
    pgliteTemplate: pgliteTemplatePath,
    childScripts: children.bundles,
    fileCpuLog,
    scratch: [pgliteTemplatePath, children.dir],
  };
  if (process.env.WEBHOOK_INBOX_SERVERS === 'none') {
    // As on a machine with only Node: PGlite, no servers (what `npm install && npm test` meets there).
    console.log('webhook-inbox tests: PGlite (embedded) only, WEBHOOK_INBOX_SERVERS=none');
    return { ...common, postgresUrl: null, redisUrl: null };
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
  return { ...common, postgresUrl: pg, redisUrl: redis };
}

/**
 * vitest runs a global setup once per project (vitest.config.ts has two), each through a module
 * of its own: the run's preparation is kept on the process, made by the first project, and
 * removed after the last project's teardown.
 */
const run = globalThis as { webhookInboxSetup?: Promise<Provided>; webhookInboxProjects?: number };

export default async function setup(project: TestProject) {
  run.webhookInboxSetup ??= prepare();
  run.webhookInboxProjects = (run.webhookInboxProjects ?? 0) + 1;
  const provided = await run.webhookInboxSetup;
  project.provide('pgliteTemplate', provided.pgliteTemplate);
  project.provide('childScripts', provided.childScripts);
  project.provide('fileCpuLog', provided.fileCpuLog);
  project.provide('postgresUrl', provided.postgresUrl);
  project.provide('redisUrl', provided.redisUrl);
  return () => {
    run.webhookInboxProjects = (run.webhookInboxProjects ?? 1) - 1;
    if (run.webhookInboxProjects > 0) return;
    for (const path of provided.scratch) rmSync(path, { recursive: true, force: true });
    run.webhookInboxSetup = undefined;
  };
}
