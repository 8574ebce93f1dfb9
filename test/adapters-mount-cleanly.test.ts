/**
 * How each adapter sits in its framework, beyond the shared status table (conformance.test.ts):
 * mounted beside the app's own routes, each adapter answers only its own path (POST, the health
 * probe, 405 for other methods) and passes the rest on; Koa's `path` and body-parser detection,
 * Fastify's encapsulation, prefix and onClose.
 * Mounting does not depend on the database, so this runs on one target: real Postgres when
 * it answers, else PGlite.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { bodyParser } from '@koa/bodyparser';
import express from 'express';
import Fastify from 'fastify';
import Koa from 'koa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { inbox as fastifyInbox } from '../adapters/fastify.js';
import { inbox as koaInbox } from '../adapters/koa.js';
import { createInbox, type Inbox, type InboxOptions } from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;
let db: TargetDb;
const schemas: string[] = [];
const applied: string[] = [];

function options(): InboxOptions {
  const schema = uniqueName('wi');
  schemas.push(schema);
  return {
    db: db.db,
    schema,
    sweepIntervalMs: 0,
    handle: (event) => {
      applied.push(event.id);
      return { ok: true };
    },
  };
}

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const post = (url: string, id: string, body = '{"amount":1}') =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': id },
    body,
  });

beforeAll(async () => {
  db = await target.open();
});
afterAll(async () => {
  if (target.name === 'postgres') {
    const { default: pg } = await import('pg');
    const pool = db.db as InstanceType<typeof pg.Pool>;
    for (const s of schemas) await pool.query(`drop schema if exists "${s}" cascade`);
  }
  await db?.close();
});

/**
 * An app with its own JSON routes and the inbox mounted the way `app.use(inbox(options))`
 * invites, with no path: the inbox takes `/webhooks` and nothing else.
 */
interface MountedApp {
  url: string;
  close(): Promise<void>;
}

async function closeBoth(server: Server, inbox: Inbox): Promise<void> {
  server.close();
  await inbox.close();
}

const APPS: Record<string, () => Promise<MountedApp>> = {
  'Express, app.use(inbox(options))': async () => {
    const middleware = expressInbox(options());
    const app = express();
    app.use(middleware);
    app.post('/orders', express.json(), (req, res) => {
      res.status(201).json({ order: req.body });
    });
    const server = createServer(app);
    const url = await listen(server);
    return { url, close: () => closeBoth(server, middleware.inbox) };
  },
  'Koa, app.use(inbox(options))': async () => {
    const middleware = koaInbox(options());
    const app = new Koa();
    app.use(middleware);
    app.use(bodyParser());
    app.use((ctx) => {
      if (ctx.method === 'POST' && ctx.path === '/orders') {
        ctx.status = 201;
        ctx.body = { order: ctx.request.body };
      }
    });
    const server = createServer(app.callback());
    const url = await listen(server);
    return { url, close: () => closeBoth(server, middleware.inbox) };
  },
  'Fastify, app.register(inbox, options)': async () => {
    const app = Fastify();
    await app.register(fastifyInbox, options());
    app.post('/orders', async (request, reply) => reply.code(201).send({ order: request.body }));
    await app.ready();
    const url = await listen(app.server);
    return { url, close: () => app.close() };
  },
};

describe.each(Object.keys(APPS))(`%s, with no path (${target.name})`, (name) => {
  let app: MountedApp;
  beforeAll(async () => {
    app = await APPS[name]!();
  });
  afterAll(() => app?.close());

  test("the app's own POST route still answers, with its parsed JSON, and nothing reaches the inbox", async () => {
    const id = `${name}-order`;
    const res = await post(`${app.url}/orders`, id, '{"sku":"a-1"}');
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ order: { sku: 'a-1' } });
    expect(applied).not.toContain(id);
  });

  test('POST /webhooks is a delivery; /webhooks/health is the probe', async () => {
    const id = `${name}-delivery`;
    const res = await post(`${app.url}/webhooks`, id);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'processed', id });
    expect(applied).toContain(id);
    expect((await fetch(`${app.url}/webhooks/health`)).status).toBe(200);
  });

  test('other methods on the webhook path: 405 problem+json with Allow: POST, nothing applied', async () => {
    for (const method of ['GET', 'PUT', 'DELETE']) {
      const res = await fetch(`${app.url}/webhooks`, { method, headers: { 'idempotency-key': 'nope' } });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow'), method).toBe('POST');
      expect(res.headers.get('content-type'), method).toMatch(/^application\/problem\+json/);
      expect(await res.json(), method).toMatchObject({ status: 405, title: 'Method not allowed' });
    }
    expect(applied).not.toContain('nope');
  });

  test('a path the app does not have is still the framework 404, not the inbox', async () => {
    const res = await post(`${app.url}/webhooks-not/here`, `${name}-404`);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type') ?? '').not.toMatch(/problem\+json/);
    expect(applied).not.toContain(`${name}-404`);
  });
});

describe(`Express mounts (${target.name})`, () => {
  test('under a path, the mount path itself is the webhook path; deeper paths go on to the app', async () => {
    const middleware = expressInbox(options());
    const app = express();
    app.use('/hooks', middleware);
    app.post('/hooks/other', (_req, res) => {
      res.status(204).end();
    });
    const server = createServer(app);
    const url = await listen(server);
    try {
      expect((await post(`${url}/hooks`, 'express-mount-1')).status).toBe(200);
      expect((await post(`${url}/hooks/other`, 'express-mount-2')).status).toBe(204);
      expect((await post(`${url}/webhooks`, 'express-mount-3')).status).toBe(404);
      expect(applied).toContain('express-mount-1');
      expect(applied).not.toContain('express-mount-2');
      expect(applied).not.toContain('express-mount-3');
    } finally {
      server.close();
      await middleware.inbox.close();
    }
  });

  test('`path` at the root, and a route that chose the middleware', async () => {
    const atPath = expressInbox({ ...options(), path: '/in/stripe' });
    const routed = expressInbox(options());
    const app = express();
    app.use(atPath);
    app.post('/in/github', routed);
    const server = createServer(app);
    const url = await listen(server);
    try {
      expect((await post(`${url}/in/stripe`, 'express-path-1')).status).toBe(200);
      expect((await post(`${url}/in/github`, 'express-path-2')).status).toBe(200);
      expect((await post(`${url}/webhooks`, 'express-path-3')).status).toBe(404);
      expect(applied).toEqual(expect.arrayContaining(['express-path-1', 'express-path-2']));
      expect(applied).not.toContain('express-path-3');
    } finally {
      server.close();
      await atPath.inbox.close();
      await routed.inbox.close();
    }
  });

  test('a `path` that is not a path is refused at construction, naming the option', () => {
    expect(() => expressInbox({ ...options(), path: 'webhooks' })).toThrow(/option `path`/);
  });
});

describe(`Koa (${target.name})`, () => {
  test('with `path`, only POSTs to that path reach the inbox; the app keeps its other routes', async () => {
    const app = new Koa();
    const middleware = koaInbox({ ...options(), path: '/webhooks/' });
    app.use(middleware);
    app.use((ctx) => {
      ctx.body = { app: ctx.path };
    });
    const server = createServer(app.callback());
    const url = await listen(server);
    try {
      expect((await post(`${url}/webhooks`, 'koa-path-1')).status).toBe(200);
      expect(await (await post(`${url}/other`, 'koa-path-2')).json()).toEqual({ app: '/other' });
      expect(applied).toContain('koa-path-1');
      expect(applied).not.toContain('koa-path-2');
    } finally {
      server.close();
      await middleware.inbox.close();
    }
  });

  test('behind a body parser that consumed the stream: 500 problem+json that says what to do, nothing applied', async () => {
    const app = new Koa();
    const middleware = koaInbox({ ...options(), path: '/webhooks' });
    app.use(bodyParser());
    app.use(middleware);
    const server = createServer(app.callback());
    const url = await listen(server);
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const res = await post(`${url}/webhooks`, 'koa-parsed-1');
      expect(res.status).toBe(500);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(((await res.json()) as { detail: string }).detail).toMatch(/consumed before it/);
      expect(applied).not.toContain('koa-parsed-1');
      expect(await middleware.inbox.event('koa-parsed-1')).toBeUndefined();
      await new Promise((r) => setImmediate(r));
      expect(warnings.join('\n')).toMatch(/Mount the inbox before koa-bodyparser/);
    } finally {
      process.off('warning', onWarning);
      server.close();
      await middleware.inbox.close();
    }
  });
});

describe(`Fastify (${target.name})`, () => {
  test("the raw-body parser stays inside the plugin: the app's own routes still get parsed JSON", async () => {
    const app = Fastify();
    await app.register(fastifyInbox, { ...options(), prefix: '/hooks' });
    app.post('/echo', async (request) => ({ parsed: request.body }));
    await app.ready();
    const url = await listen(app.server);
    try {
      const res = await post(`${url}/hooks`, 'fastify-scope-1');
      expect(await res.json()).toMatchObject({ status: 'processed', id: 'fastify-scope-1' });
      expect(await (await post(`${url}/echo`, 'x', '{"a":1}')).json()).toEqual({ parsed: { a: 1 } });
      expect(app.webhookInbox).toBeDefined();
      expect(await app.webhookInbox.event('fastify-scope-1')).toMatchObject({ status: 'processed' });
    } finally {
      await app.close();
    }
  });

  test('app.close() closes an inbox the plugin created, not one it was given', async () => {
    const closed: string[] = [];
    const watch = (inbox: Inbox, name: string) => {
      const close = inbox.close.bind(inbox);
      inbox.close = () => {
        closed.push(name);
        return close();
      };
    };
    const own = Fastify();
    await own.register(fastifyInbox, options());
    await own.ready();
    watch(own.webhookInbox, 'created');
    await own.close();

    const shared = createInbox(options());
    watch(shared, 'given');
    const given = Fastify();
    await given.register(fastifyInbox, { inbox: shared, prefix: '/webhooks' });
    await given.ready();
    await given.close();
    expect(closed).toEqual(['created']);
    await shared.close();
  });
});
