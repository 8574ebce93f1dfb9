/**
 * The package a user installs: build, `npm pack`, install the tarball into a scratch project
 * (with the framework packages and PGlite), and for each framework type-check a TypeScript
 * consumer with the project's tsc, run it as ESM (it serves one delivery over HTTP), and
 * require() the package from CommonJS; its types resolve under moduleResolution node16, bundler
 * and node10. A second project holds only the tarball, `pg` and Express: PGlite, an optional
 * peer, is absent, and the package still serves deliveries on PostgreSQL. One build, two
 * installs, shared by every case.
 *
 * Nothing here touches the repository's own dist/: the build goes to a staging copy.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { postgresUrl, uniqueName } from './support/databases.js';

const run = promisify(execFile);
const repo = resolve(import.meta.dirname, '..');
const tsc = join(repo, 'node_modules', 'typescript', 'bin', 'tsc');
const FRAMEWORKS = ['express', 'koa', 'fastify', 'hono', 'fetch'] as const;
/** The minimal apps of examples/ that type-check against the published package. */
const EXAMPLES = ['express', 'koa', 'fastify', 'hono'] as const;
/** Installed next to the tarball, at the versions this repository tests with (so the npm cache has them). */
const CONSUMER_DEPS = [
  '@electric-sql/pglite',
  'express',
  'koa',
  '@koa/router',
  'fastify',
  '@types/express',
  '@types/koa',
  '@types/node',
  'hono',
  '@hono/node-server',
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
  hono: `
import { Hono } from 'hono';
import type { InboxEvent } from 'webhook-inbox';
import { inbox } from 'webhook-inbox/hono';
import { inboxOptions } from './deliver.js';

const app = new Hono();
const middleware = inbox({ ...inboxOptions, path: '/webhooks', handle: (event: InboxEvent<{ n: number }>) => ({ doubled: event.body.n * 2 }) });
app.use(middleware);
// Hono's own in-process request: a fetch Request through the app.
const res = await app.request('/webhooks', {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'idempotency-key': 'pkg-1' },
  body: JSON.stringify({ n: 21 }),
});
console.log(JSON.stringify({ status: res.status, body: await res.json() }));
await middleware.inbox.close();
`,
  fetch: `
import { handler } from 'webhook-inbox/fetch';
import { inboxOptions } from './deliver.js';

// A Next.js route handler's shape: a plain Request in, a Response out.
const POST = handler<any, { n: number }>({ ...inboxOptions, handle: (event) => ({ doubled: event.body.n * 2 }) });
const res = await POST(
  new Request('http://localhost/webhooks', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'pkg-1' },
    body: JSON.stringify({ n: 21 }),
  }),
);
console.log(JSON.stringify({ status: res.status, body: await res.json() }));
await POST.inbox.close();
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

/**
 * Every subpath, imported under one moduleResolution. node10 (TypeScript's old `node`) does
 * not read `exports`; `typesVersions` in package.json maps the subpaths for it.
 */
const TYPES_CHECK = `
import { createInbox, type InboxOptions } from 'webhook-inbox';
import { inbox as expressInbox } from 'webhook-inbox/express';
import { inbox as fastifyInbox } from 'webhook-inbox/fastify';
import { inbox as koaInbox } from 'webhook-inbox/koa';
import { inbox as honoInbox } from 'webhook-inbox/hono';
import { handler as fetchHandler } from 'webhook-inbox/fetch';
import { createSender } from 'webhook-inbox/sender';
import { createConsole } from 'webhook-inbox/console';
import * as testing from 'webhook-inbox/testing';

const options: InboxOptions = { db: 'memory', handle: () => ({ ok: true }) };
export const used = [createInbox, expressInbox, fastifyInbox, koaInbox, honoInbox, fetchHandler, createSender, createConsole, testing, options];
`;
const RESOLUTIONS = {
  node16: { module: 'Node16', moduleResolution: 'Node16' },
  bundler: { module: 'ESNext', moduleResolution: 'Bundler' },
  node10: { module: 'CommonJS', moduleResolution: 'Node10' },
} as const;
/** What tsc printed for TYPES_CHECK under each moduleResolution. */
const typesOutput: Record<string, string> = {};

/** The project with only the tarball, pg and Express: no PGlite. */
const LEAN_CONSUMER = `
import express from 'express';
import { createInbox } from 'webhook-inbox';
import { inbox } from 'webhook-inbox/express';

const core = createInbox({
  db: process.env.CONSUMER_DB || undefined,
  schema: process.env.CONSUMER_SCHEMA,
  sweepIntervalMs: 0,
  handle: (event) => ({ doubled: event.body.n * 2 }),
});
try {
  await core.ready();
} catch (err) {
  console.log(JSON.stringify({ name: err.name, error: err.message }));
  process.exit(3);
}
const app = express();
app.use(inbox(core)); // at the root: it answers at /webhooks only
app.post('/orders', express.json(), (req, res) => res.status(201).json(req.body));
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const base = \`http://127.0.0.1:\${server.address().port}\`;
const res = await fetch(\`\${base}/webhooks\`, {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'idempotency-key': 'lean-1' },
  body: JSON.stringify({ n: 21 }),
});
const order = await fetch(\`\${base}/orders\`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: '{"sku":"a"}',
});
console.log(JSON.stringify({ status: res.status, body: await res.json(), order: order.status }));
server.close();
await core.close();
`;

/**
 * The README's quick start as printed: the SQL of its `payments` table (from its shell block)
 * and its server, the section's first TypeScript snippet.
 */
function quickStart(): { sql: string; server: string } {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Quick start\n');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const server = /^```ts\n([\s\S]*?)^```$/m.exec(section)?.[1];
  const sql = /'(create table payments [^']*)'/.exec(section)?.[1];
  if (!server || !sql)
    throw new Error("README.md's quick start has no TypeScript snippet, or no `create table payments`");
  return { sql, server };
}

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

let scratch: string;
/** The file list of `npm pack --dry-run` in the repository (the `files` of package.json). */
let packedFromRepo: string[] = [];
/** The file list of the tarball built from a fresh build. */
let packed: string[] = [];
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
  // The build, into a staging copy of the package (package.json, README, ops/, dist).
  await run(process.execPath, [
    tsc,
    '-p',
    join(repo, 'tsconfig.build.json'),
    '--outDir',
    join(staging, 'dist'),
  ]);
  for (const file of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'ops']) {
    cpSync(join(repo, file), join(staging, file), { recursive: true });
  }
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: staging });
  const tarball = join(scratch, JSON.parse(stdout)[0].filename);
  packed = JSON.parse(stdout)[0].files.map((f: { path: string }) => f.path);
  const dryRun = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: repo });
  packedFromRepo = JSON.parse(dryRun.stdout)[0].files.map((f: { path: string }) => f.path);

  // The lean project, installed while the other one is: the tarball, pg and Express only.
  const lean = join(scratch, 'lean');
  mkdirSync(lean);
  writeFileSync(join(lean, 'package.json'), JSON.stringify({ name: 'lean', private: true, type: 'module' }));
  writeFileSync(join(lean, 'serve.js'), LEAN_CONSUMER);
  const leanInstall = run(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--loglevel=error',
      tarball,
      `pg@${version('pg')}`,
      `express@${version('express')}`,
    ],
    { cwd: lean, timeout: 480_000 },
  );

  // The README's quick start: a new ESM project with what it says to install, and its server.
  const quickstart = join(scratch, 'quickstart');
  mkdirSync(quickstart);
  writeFileSync(
    join(quickstart, 'package.json'),
    JSON.stringify({ name: 'quickstart', private: true, type: 'module' }),
  );
  writeFileSync(join(quickstart, 'server.ts'), quickStart().server);
  const quickstartInstall = run(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--loglevel=error',
      tarball,
      ...['express', 'stripe', 'tsx'].map((d) => `${d}@${version(d)}`),
    ],
    { cwd: quickstart, timeout: 480_000 },
  );

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
  inbox: typeof (adapter.inbox ?? adapter.handler), // webhook-inbox/fetch exports handler
  sameInbox: adapter.Inbox === core.Inbox,
}));
`,
    );
  }
  // The minimal example apps in examples/ must type-check against the published package too.
  mkdirSync(join(consumer, 'examples'));
  for (const framework of EXAMPLES) {
    cpSync(join(repo, 'examples', `${framework}.ts`), join(consumer, 'examples', `${framework}.ts`));
  }
  // One tsc run for both; it emits out/*.js, which the ESM cases run. The three
  // moduleResolution checks run beside it.
  mkdirSync(join(consumer, 'resolution'));
  writeFileSync(join(consumer, 'resolution', 'check.ts'), TYPES_CHECK);
  for (const [name, options] of Object.entries(RESOLUTIONS)) {
    writeFileSync(
      join(consumer, 'resolution', `tsconfig.${name}.json`),
      JSON.stringify({
        compilerOptions: { ...options, target: 'ES2022', strict: true, noEmit: true, skipLibCheck: true },
        files: ['check.ts'],
      }),
    );
  }
  const checks = Object.keys(RESOLUTIONS).map(async (name) => {
    typesOutput[name] = await tscIn(join(consumer, 'resolution'), ['-p', `tsconfig.${name}.json`]);
  });
  [tscOutput] = await Promise.all([
    tscIn(consumer, ['-p', 'tsconfig.json']),
    leanInstall,
    quickstartInstall,
    ...checks,
  ]);
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
  test('exports lists types first for ., ./express, ./koa, ./fastify, ./hono, ./fetch, ./console and ./providers, and ships what they point to', () => {
    const installed = join(scratch, 'consumer', 'node_modules', 'webhook-inbox');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    for (const subpath of [
      '.',
      './express',
      './koa',
      './fastify',
      './hono',
      './fetch',
      './console',
      './providers',
    ]) {
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

  test.each(Object.keys(RESOLUTIONS))('every subpath has types under moduleResolution %s', (name) => {
    expect(typesOutput[name]).toBe('');
  });

  test('npm pack ships the build, README, CHANGELOG, LICENSE and ops/: no tests, benches, examples or source maps', () => {
    for (const files of [packedFromRepo, packed]) {
      for (const file of files) {
        expect(file).toMatch(
          /^(dist\/(src|adapters)\/|ops\/(grafana|prometheus)\/|package\.json$|README\.md$|CHANGELOG\.md$|LICENSE$)/,
        );
        expect(file).not.toMatch(/(^|\/)(test|tests|bench|examples?)\/|\.test\./);
      }
    }
    // Source maps: checked on the fresh build only (a local dist/ may hold an older build's).
    expect(packed.filter((file) => file.endsWith('.map'))).toEqual([]);
    expect(packed).toEqual(expect.arrayContaining(['LICENSE', 'README.md', 'CHANGELOG.md', 'package.json']));
    expect(packed).toContain('dist/src/index.d.ts');
    // What docs/operations.md tells an operator to import into Grafana and Prometheus.
    expect(packed).toEqual(
      expect.arrayContaining([
        'ops/grafana/webhook-inbox-dashboard.json',
        'ops/prometheus/webhook-inbox-alerts.yml',
      ]),
    );
  });

  test('with PGlite installed and no `db`, it serves a delivery in memory and warns once', async () => {
    const { stdout, stderr } = await run(process.execPath, [join('out', 'express.js')], {
      cwd: join(scratch, 'consumer'),
      env: { ...process.env, CONSUMER_DB: '', CONSUMER_SCHEMA: 'pkg_memory', NODE_ENV: 'development' },
      timeout: 120_000,
    });
    expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({
      status: 200,
      body: { status: 'processed', id: 'pkg-1', result: { doubled: 42 } },
    });
    expect(stderr.match(/events are kept in an in-memory database/g)).toHaveLength(1);
  }, 150_000);
});

describe('a project with only the package, pg and Express (no PGlite)', () => {
  const lean = () => join(scratch, 'lean');

  test('PGlite, an optional peer, is not installed; fastify-plugin, a dependency, is', () => {
    expect(() =>
      readFileSync(join(lean(), 'node_modules', '@electric-sql', 'pglite', 'package.json')),
    ).toThrow();
    expect(() => readFileSync(join(lean(), 'node_modules', 'fastify-plugin', 'package.json'))).not.toThrow();
  });

  test.runIf(postgresUrl)(
    'it serves a delivery on PostgreSQL, and the app keeps its own routes',
    async () => {
      const schema = uniqueName('pkg');
      schemas.push(schema);
      const { stdout } = await run(process.execPath, ['serve.js'], {
        cwd: lean(),
        env: { ...process.env, CONSUMER_DB: postgresUrl ?? '', CONSUMER_SCHEMA: schema },
        timeout: 120_000,
      });
      expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({
        status: 200,
        body: { status: 'processed', id: 'lean-1', result: { doubled: 42 } },
        order: 201,
      });
    },
    150_000,
  );

  test('with no `db`, opening says that @electric-sql/pglite is needed and how to install it', async () => {
    const result = await run(process.execPath, ['serve.js'], {
      cwd: lean(),
      env: { ...process.env, CONSUMER_DB: '', NODE_ENV: 'development' },
      timeout: 120_000,
    }).then(
      () => ({ code: 0, stdout: '' }),
      (err) => err as { code: number; stdout: string },
    );
    expect(result.code).toBe(3);
    expect(JSON.parse(result.stdout.trim()).name).toBe('EmbeddedDatabaseUnavailableError');
    expect(JSON.parse(result.stdout.trim()).error).toMatch(
      /@electric-sql\/pglite is not installed\. Install it \(npm install @electric-sql\/pglite\)/,
    );
  }, 150_000);

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

describe("the README's quick start, in a new ESM project with the package, express, stripe and tsx", () => {
  test.runIf(postgresUrl)(
    'run as printed against a fresh database: a Stripe-signed payment_intent.succeeded is answered 200 and writes its payments row',
    async () => {
      const database = uniqueName('quickstart');
      const admin = new pg.Client(postgresUrl!);
      await admin.connect();
      await admin.query(`create database "${database}"`);
      const url = new URL(postgresUrl!);
      url.pathname = `/${database}`;
      const app = new pg.Client(url.toString());
      const secret = `whsec_${randomBytes(24).toString('base64')}`;
      const port = await freePort();
      const env: Record<string, string | undefined> = {
        ...process.env,
        DATABASE_URL: url.toString(),
        STRIPE_WEBHOOK_SECRET: secret,
        PORT: String(port),
      };
      delete env.NODE_ENV; // a developer's shell, not vitest's `test`
      let server: ReturnType<typeof spawn> | undefined;
      let output = '';
      try {
        await app.connect();
        await app.query(quickStart().sql);
        // `npx tsx server.ts`, as the snippet's first line says.
        server = spawn(process.execPath, [join('node_modules', 'tsx', 'dist', 'cli.mjs'), 'server.ts'], {
          cwd: join(scratch, 'quickstart'),
          env,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        server.stdout!.on('data', (chunk) => (output += chunk));
        server.stderr!.on('data', (chunk) => (output += chunk));
        const exited = once(server, 'exit').then(([code]) => {
          throw new Error(`the quick start exited (${code}) before it answered:\n${output}`);
        });
        exited.catch(() => {});
        const base = `http://127.0.0.1:${port}/webhooks`;
        const answered = async () => {
          for (const deadline = Date.now() + 90_000; Date.now() < deadline; ) {
            const health = await fetch(`${base}/health`).catch(() => undefined);
            if (health?.status === 200) return;
            await new Promise((r) => setTimeout(r, 250));
          }
          throw new Error(`the quick start did not answer its health route within 90 s:\n${output}`);
        };
        await Promise.race([answered(), exited]);

        const payload = JSON.stringify({
          id: 'evt_quickstart_1',
          object: 'event',
          type: 'payment_intent.succeeded',
          created: Math.floor(Date.now() / 1000),
          data: {
            object: { id: 'pi_quickstart_1', object: 'payment_intent', amount: 2000, currency: 'eur' },
          },
        });
        const res = await fetch(base, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret }),
          },
          body: payload,
        });
        expect({ status: res.status, body: await res.json() }, output).toMatchObject({
          status: 200,
          body: { status: 'processed', id: 'evt_quickstart_1' },
        });
        const { rows } = await app.query('select id, amount::int as amount from payments');
        expect(rows).toEqual([{ id: 'pi_quickstart_1', amount: 2000 }]);
      } finally {
        server?.kill();
        if (server && server.exitCode === null) await once(server, 'exit');
        await app.end().catch(() => {});
        await admin.query(`drop database if exists "${database}" with (force)`);
        await admin.end();
      }
    },
    150_000,
  );
});
