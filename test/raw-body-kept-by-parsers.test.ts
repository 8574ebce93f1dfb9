/**
 * A body parser ran before the inbox: the Express adapter takes the bytes it kept in
 * `req.rawBody` (the `express.json({ verify })` pattern, NestJS `rawBody: true`), on Express 5
 * and Express 4, and still refuses with a clear 500 problem when only a parsed body (or a
 * decoded string) is left. Driven in process with supertest.
 */
import { createHmac, randomUUID } from 'node:crypto';
import express from 'express';
import express4 from 'express4';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { createInbox, hmacSignature, type Inbox } from '../src/index.js';
import { pgliteTarget, type TargetDb } from './support/databases.js';

const SECRET = 'kept-bytes-secret';
const sign = (body: string) => `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;

describe.each([
  { name: 'Express 5', framework: express },
  { name: 'Express 4', framework: express4 },
])('$name', ({ framework }) => {
  let db: TargetDb;
  let core: Inbox;
  const runs: unknown[] = [];
  beforeAll(async () => {
    db = await pgliteTarget.open();
    core = createInbox({
      db: db.db,
      schema: db.schema,
      sweepIntervalMs: 0,
      verify: hmacSignature({ header: 'x-signature', prefix: 'sha256=', secret: SECRET }),
      handle: (event) => {
        runs.push(event.body);
        return { got: event.body };
      },
    });
  });
  afterAll(async () => {
    await core?.close();
    await db?.close();
  });

  // Whitespace a parser would not reproduce: the signature holds only over the exact bytes.
  const deliver = (app: express.Express, id: string, body = '{ "amount" :  7 }') =>
    request(app)
      .post('/webhooks')
      .set({ 'content-type': 'application/json', 'idempotency-key': id, 'x-signature': sign(body) })
      .send(body);

  test('express.json({ verify }) keeping req.rawBody: verified and applied over the exact bytes', async () => {
    const app = framework();
    app.use(
      framework.json({
        verify: (req, _res, buf) => {
          (req as unknown as { rawBody?: unknown }).rawBody = buf;
        },
      }),
    );
    app.use('/webhooks', expressInbox(core));
    const id = `evt_${randomUUID()}`;
    const reply = await deliver(app, id);
    expect(reply.status).toBe(200);
    expect(reply.body).toMatchObject({ status: 'processed', result: { got: { amount: 7 } } });
    const again = await deliver(app, id);
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect((await core.event(id))?.status).toBe('processed');
  });

  test('express.json() alone: 500 problem, nothing stored, no handler run', async () => {
    const app = framework();
    app.use(framework.json());
    app.use('/webhooks', expressInbox(core));
    const before = runs.length;
    const id = `evt_${randomUUID()}`;
    const reply = await deliver(app, id);
    expect(reply.status).toBe(500);
    expect(reply.headers['content-type']).toMatch(/application\/problem\+json/);
    expect(reply.body.detail).toMatch(/consumed/); // the fix is in the one-time log warning
    expect(runs.length).toBe(before);
    expect(await core.event(id)).toBeUndefined();
  });

  test('a decoded string in req.rawBody is not the bytes: refused the same way', async () => {
    const app = framework();
    app.use(
      framework.json({
        verify: (req, _res, buf) => {
          (req as unknown as { rawBody?: unknown }).rawBody = buf.toString('utf8');
        },
      }),
    );
    app.use('/webhooks', expressInbox(core));
    const id = `evt_${randomUUID()}`;
    const reply = await deliver(app, id);
    expect(reply.status).toBe(500);
    expect(await core.event(id)).toBeUndefined();
  });
});
