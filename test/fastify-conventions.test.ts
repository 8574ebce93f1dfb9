/**
 * The Fastify plugin follows Fastify's conventions: the inbox logs through the app's logger
 * (`fastify.log`) unless given one; a second inbox registers under its own decorator name; the
 * routes carry schemas, so the endpoint shows in `@fastify/swagger`'s document. Driven with
 * `app.inject` (Fastify's in-process requests).
 */
import { Writable } from 'node:stream';
import swagger from '@fastify/swagger';
import Fastify from 'fastify';
import rawBody from 'fastify-raw-body';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox } from '../adapters/fastify.js';
import { type Inbox, InboxOptionsError } from '../src/index.js';
import { pgliteTarget, type TargetDb, uniqueName } from './support/databases.js';

declare module 'fastify' {
  interface FastifyInstance {
    billingInbox: Inbox;
  }
}

describe('the Fastify plugin', () => {
  let db: TargetDb;
  beforeAll(async () => {
    db = await pgliteTarget.open();
  });
  afterAll(async () => {
    await db?.close();
  });
  const options = () => ({ db: db.db, schema: uniqueName('wi'), sweepIntervalMs: 0 });

  test("Fastify's own register options (logLevel, logSerializers) are Fastify's, not unknown inbox options", async () => {
    const app = Fastify();
    await app.register(inbox, {
      ...options(),
      prefix: '/webhooks',
      logLevel: 'warn',
      logSerializers: {},
      handle: () => ({ ok: true }),
    } as never);
    try {
      const reply = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'evt_register_options' },
        payload: '{"a":1}',
      });
      expect(reply.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  test("logs through the app's logger (fastify.log) by default", async () => {
    const lines: Record<string, unknown>[] = [];
    const stream = new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    });
    const app = Fastify({ logger: { level: 'info', stream } });
    await app.register(inbox, {
      ...options(),
      prefix: '/webhooks',
      handle: () => {
        throw new Error('boom');
      },
    });
    try {
      const reply = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'evt_log_1' },
        payload: '{"a":1}',
      });
      expect(reply.statusCode).toBe(500);
      const failed = lines.find((l) => l.msg === 'webhook-inbox: handler failed');
      expect(failed).toMatchObject({ level: 40, id: 'evt_log_1' });
    } finally {
      await app.close();
    }
  });

  test('a second inbox registers under its own decorator name; a taken name is refused', async () => {
    const app = Fastify();
    await app.register(inbox, { ...options(), prefix: '/orders', handle: () => ({ inbox: 'orders' }) });
    await app.register(inbox, {
      ...options(),
      prefix: '/billing',
      decorator: 'billingInbox',
      handle: () => ({ inbox: 'billing' }),
    });
    try {
      const post = (url: string, id: string) =>
        app.inject({
          method: 'POST',
          url,
          headers: { 'content-type': 'application/json', 'idempotency-key': id },
          payload: '{}',
        });
      expect((await post('/orders', 'evt_o')).json()).toMatchObject({ result: { inbox: 'orders' } });
      expect((await post('/billing', 'evt_b')).json()).toMatchObject({ result: { inbox: 'billing' } });
      expect(await app.billingInbox.event('evt_b')).toMatchObject({ status: 'processed' });
      expect(await app.billingInbox.event('evt_o')).toBeUndefined();
      expect(await app.webhookInbox.event('evt_o')).toMatchObject({ status: 'processed' });
      expect(app.webhookInbox).not.toBe(app.billingInbox);
    } finally {
      await app.close();
    }
    const again = Fastify();
    await again.register(inbox, { ...options(), prefix: '/a', decorator: 'billingInbox', handle: () => {} });
    await expect(
      again.register(inbox, { ...options(), prefix: '/b', decorator: 'billingInbox', handle: () => {} }),
    ).rejects.toThrow(InboxOptionsError);
    await again.close();
  });

  test('beside fastify-raw-body registered for the whole app, deliveries are applied from the exact bytes', async () => {
    const app = Fastify();
    await app.register(rawBody, { global: true, runFirst: true, encoding: false });
    await app.register(inbox, {
      ...options(),
      prefix: '/webhooks',
      handle: (event) => ({ got: event.body }),
    });
    app.post('/orders', async (request) => ({ raw: Buffer.isBuffer(request.rawBody), body: request.body }));
    try {
      const reply = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'evt_raw_1' },
        payload: '{ "a" : 1 }',
      });
      expect(reply.statusCode).toBe(200);
      expect(reply.json()).toMatchObject({ status: 'processed', result: { got: { a: 1 } } });
      const stored = await app.webhookInbox.event('evt_raw_1');
      expect(stored?.status).toBe('processed');
      // The app's own routes keep fastify-raw-body's rawBody and Fastify's JSON parser.
      const order = await app.inject({
        method: 'POST',
        url: '/orders',
        headers: { 'content-type': 'application/json' },
        payload: '{"sku":"a"}',
      });
      expect(order.json()).toEqual({ raw: true, body: { sku: 'a' } });
    } finally {
      await app.close();
    }
  });

  test('the routes show in the @fastify/swagger document; 405 routes are hidden', async () => {
    const app = Fastify();
    await app.register(swagger, { openapi: { info: { title: 'app', version: '1' } } });
    await app.register(inbox, { ...options(), prefix: '/webhooks', handle: () => {} });
    try {
      await app.ready();
      const doc = app.swagger() as {
        paths: Record<string, Record<string, { summary?: string; tags?: string[] }>>;
      };
      // Fastify serves the prefix with and without its trailing slash; the document lists one.
      const path = doc.paths['/webhooks/'] ?? doc.paths['/webhooks'];
      expect(path.post).toMatchObject({
        summary: 'Receive a webhook delivery',
        tags: ['webhooks'],
      });
      expect(doc.paths['/webhooks/health'].get).toMatchObject({ summary: 'Inbox health' });
      expect(path.put).toBeUndefined();
      // Documentation only: a delivery is still answered by the core, not by Fastify's validation.
      const reply = await app.inject({
        method: 'POST',
        url: '/webhooks',
        payload: '{}',
        headers: { 'content-type': 'application/json' },
      });
      expect(reply.statusCode).toBe(400);
      expect(reply.json()).toMatchObject({ field: 'idempotency-key' });
    } finally {
      await app.close();
    }
  });
});
