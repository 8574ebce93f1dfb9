/**
 * The package a user installs: build, `npm pack`, install the tarball into a scratch project
 * (with the framework packages), and for each framework type-check a TypeScript consumer with
 * the project's tsc, run it as ESM (it serves one delivery over HTTP), and require() the
 * package from CommonJS. One build and one install, shared by every case.
 *
 * Nothing here touches the repository's own dist/: the build goes to a staging copy.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { postgresUrl, uniqueName } from './support/databases.js';

const run = promisify(execFile);
const repo = resolve(import.meta.dirname, '..');
const tsc = join(repo, 'node_modules', 'typescript', 'bin', 'tsc');
const FRAMEWORKS = ['express', 'koa', 'fastify'] as const;
/** Installed next to the tarball, at the versions this repository tests with (so the npm cache has them). */
const CONSUMER_DEPS = [
  'express',
  'koa',
  '@koa/router',
  'fastify',
  'fastify-plugin',
  '@types/express',
  '@types/koa',
  '@types/node',
];

const version = (name: string) =>
  JSON.parse(readFileSync(join(repo, 'node_modules', name, 'package.json'), 'utf8')).version as string;

/** Each consumer serves one delivery through its framework's idiomatic mount, then exits. */
const CONSUMERS: Record<(typeof FRAMEWORKS)[number], string> = {
  express: `
import express from 'express';
import { createInbox, type InboxEvent } from 'webhook-inbox';
import { inbox } from 'webhook-inbox/express';
import { deliverOne, inboxOptions } from './deliver.js';

const core = createInbox({ ...inboxOptions, handle: (event: InboxEvent<{ n: number }>) => ({ doubled: event.body.n * 2 }) });
const app = express();
app.use('/webhooks', inbox(core));
const server = app.listen(0, '127.0.0.1');
await deliverOne(server);
await core.close();
`,
  koa: `
import Router from '@koa/router';
import Koa from 'koa';
import type { InboxEvent } from 'webhook-inbox';
import { inbox } from 'webhook-inbox/koa';
import { deliverOne, inboxOptions } from './deliver.js';

const app = new Koa();
const router = new Router();
const middleware = inbox({ ...inboxOptions, handle: (event: InboxEvent<{ n: number }>) => ({ doubled: event.body.n * 2 }) });
router.post('/webhooks', middleware);
app.use(router.routes());
const server = app.listen(0, '127.0.0.1');
await deliverOne(server);
await middleware.inbox.close();
`,
  fastify: `
import Fastify from 'fastify';
import type { Inbox, InboxEvent } from 'webhook-inbox';
import { inbox } from 'webhook-inbox/fastify';
import { deliverOne, inboxOptions } from './deliver.js';

const app = Fastify();
await app.register(inbox, {
  ...inboxOptions,
  prefix: '/webhooks',
  handle: (event: InboxEvent<{ n: number }>) => ({ doubled: event.body.n * 2 }),
});
await app.ready();
const decorated: Inbox = app.webhookInbox; // the declare-module augmentation
void decorated;
await deliverOne(app.server.listen(0, '127.0.0.1'));
await app.close(); // closes the inbox too (onClose)
`,
};

const DELIVER = `
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { InboxOptions } from 'webhook-inbox';

export const inboxOptions = {
  db: process.env.CONSUMER_DB || undefined,
  schema: process.env.CONSUMER_SCHEMA,
  sweepIntervalMs: 0,
} satisfies Partial<InboxOptions>;

export async function deliverOne(server: Server): Promise<void> {
  if (!server.listening) await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const res = await fetch(\`http://127.0.0.1:\${port}/webhooks\`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'pkg-1' },
    body: JSON.stringify({ n: 21 }),
  });
  console.log(JSON.stringify({ status: res.status, body: await res.json() }));
  server.close();
}
`;

let scratch: string;
const schemas: string[] = [];
/** What tsc printed for the consumers and examples/ (empty when they type-check). */
let tscOutput = '';

async function tscIn(cwd: string, args: string[]): Promise<string> {
  const result = await run(process.execPath, [tsc, ...args], { cwd }).catch((err) => err);
  return `${result.stdout ?? ''}${result.stderr ?? ''}`;
}

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'webhook-inbox-package-'));
  const staging = join(scratch, 'staging');
  const consumer = join(scratch, 'consumer');
  mkdirSync(staging);
  mkdirSync(consumer);
  // The build, into a staging copy of the package (package.json, README, dist).
  await run(process.execPath, [
    tsc,
    '-p',
    join(repo, 'tsconfig.build.json'),
    '--outDir',
    join(staging, 'dist'),
  ]);
  cpSync(join(repo, 'package.json'), join(staging, 'package.json'));
  cpSync(join(repo, 'README.md'), join(staging, 'README.md'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: staging });
  const tarball = join(scratch, JSON.parse(stdout)[0].filename);

  writeFileSync(
    join(consumer, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2),
  );
  await run(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--loglevel=error',
      tarball,
      ...CONSUMER_DEPS.map((d) => `${d}@${version(d)}`),
    ],
    { cwd: consumer, timeout: 480_000 },
  );
  writeFileSync(
    join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        types: ['node'],
        outDir: 'out',
        // Third-party declarations are not ours to check; ours are used, so they are checked.
        skipLibCheck: true,
      },
      include: ['*.ts', 'examples/*.ts'],
    }),
  );
  writeFileSync(join(consumer, 'deliver.ts'), DELIVER);
  for (const framework of FRAMEWORKS) {
    writeFileSync(join(consumer, `${framework}.ts`), CONSUMERS[framework]);
    writeFileSync(
      join(consumer, `${framework}.cjs`),
      `const core = require('webhook-inbox');
const adapter = require('webhook-inbox/${framework}');
console.log(JSON.stringify({
  createInbox: typeof core.createInbox,
  standardWebhooks: typeof core.standardWebhooks,
  inbox: typeof adapter.inbox,
  sameInbox: adapter.Inbox === core.Inbox,
}));
`,
    );
  }
  // The minimal example apps in examples/ must type-check against the published package too.
  mkdirSync(join(consumer, 'examples'));
  for (const framework of FRAMEWORKS) {
    cpSync(join(repo, 'examples', `${framework}.ts`), join(consumer, 'examples', `${framework}.ts`));
  }
  // One tsc run for both; it emits out/*.js, which the ESM cases run.
  tscOutput = await tscIn(consumer, ['-p', 'tsconfig.json']);
}, 600_000);

afterAll(async () => {
  if (postgresUrl && schemas.length) {
    const client = new pg.Client(postgresUrl);
    await client.connect();
    for (const s of schemas) await client.query(`drop schema if exists "${s}" cascade`);
    await client.end();
  }
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the packed package', () => {
  test('exports lists types first for ., ./express, ./koa and ./fastify, and ships what they point to', () => {
    const installed = join(scratch, 'consumer', 'node_modules', 'webhook-inbox');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    for (const subpath of ['.', './express', './koa', './fastify']) {
      const entry = manifest.exports[subpath];
      expect(Object.keys(entry)[0], subpath).toBe('types');
      for (const file of Object.values(entry) as string[]) {
        expect(() => readFileSync(join(installed, file)), `${subpath} → ${file}`).not.toThrow();
      }
    }
    // Only the build and the README: no tests, no sources, no examples.
    expect(() => readFileSync(join(installed, 'test', 'package.test.ts'))).toThrow();
  });

  test("the consumers and examples/ type-check with the project's tsc", () => {
    expect(tscOutput).toBe('');
  });

  describe.each(FRAMEWORKS)('%s', (framework) => {
    test('imported as ESM, it serves a delivery over HTTP', async () => {
      const schema = uniqueName('pkg');
      schemas.push(schema);
      const { stdout } = await run(process.execPath, [join('out', `${framework}.js`)], {
        cwd: join(scratch, 'consumer'),
        env: { ...process.env, CONSUMER_DB: postgresUrl ?? '', CONSUMER_SCHEMA: schema },
        timeout: 120_000,
      });
      expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({
        status: 200,
        body: { status: 'processed', id: 'pkg-1', result: { doubled: 42 } },
      });
    }, 150_000);

    test('require()d from CommonJS', async () => {
      const { stdout } = await run(process.execPath, [`${framework}.cjs`], {
        cwd: join(scratch, 'consumer'),
      });
      expect(JSON.parse(stdout)).toEqual({
        createInbox: 'function',
        standardWebhooks: 'function',
        inbox: 'function',
        sameInbox: true,
      });
    }, 60_000);
  });
});
