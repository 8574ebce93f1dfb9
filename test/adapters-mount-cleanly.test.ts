/**
 * How each adapter sits in its framework, beyond the shared status table (conformance.test.ts):
 * Koa's `path` and body-parser detection, Fastify's encapsulation, prefix and onClose.
 * Mounting does not depend on the database, so this runs on one target: real Postgres when
 * it answers, else PGlite.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { bodyParser } from '@koa/bodyparser';
import Fastify from 'fastify';
import Koa from 'koa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
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
