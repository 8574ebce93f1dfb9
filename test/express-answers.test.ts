/**
 * How the Express adapter writes its answers, on Express 5 and Express 4, over real sockets:
 * a delivery's answer is written with Node's API (no `res.send`), so this pins what a sender
 * sees of it — status, body, exact content type and length, the headers earlier middleware set
 * — and that the rare answers still written by `res.send` (a `respond` hook's own content type,
 * a 204, the health probe) keep Express's handling.
 */
import express from 'express';
import express4 from 'express4';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { createInbox, type Inbox } from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;

describe.each([
  { name: 'Express 5', framework: express },
  { name: 'Express 4', framework: express4 },
])(`$name answers (${target.name})`, ({ framework }) => {
  let db: TargetDb;
  let core: Inbox;
  let app: express.Express;
  const schema = uniqueName('wi');
  beforeAll(async () => {
    db = await target.open();
    core = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      // A result with characters of two and three bytes: the length is counted in bytes.
      handle: (event) => ({ name: 'é✓', id: event.id }),
      respond: (outcome, event) => {
        const shape = (event?.body as { shape?: string } | undefined)?.shape;
        if (outcome.kind !== 'processed') return undefined;
        if (shape === 'csv') return { headers: { 'content-type': 'text/csv' }, body: 'a,b' };
        if (shape === 'empty') return { status: 204 };
        return undefined;
      },
    });
    app = framework();
    // What an app's own middleware sets before the inbox answers.
    app.use((_req, res, next) => {
      res.setHeader('x-request-id', 'req-1');
      res.setHeader('access-control-allow-origin', '*');
      next();
    });
    app.use('/webhooks', expressInbox(core));
  });
  afterAll(async () => {
    await core?.close();
    if (target.name === 'postgres') {
      const { default: pg } = await import('pg');
      await (db.db as InstanceType<typeof pg.Pool>).query(`drop schema if exists "${schema}" cascade`);
    }
    await db?.close();
  });

  const deliver = (id: string | undefined, body = '{"amount":1}') =>
    request(app)
      .post('/webhooks')
      .set({ 'content-type': 'application/json', ...(id === undefined ? {} : { 'idempotency-key': id }) })
      .send(body);

  test('processed, then a duplicate: exact type and byte length, middleware headers kept, no ETag', async () => {
    const id = uniqueName('ans');
    const first = await deliver(id);
    expect(first.status).toBe(200);
    expect(first.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(first.text).toBe(JSON.stringify({ status: 'processed', id, result: { name: 'é✓', id } }));
    expect(first.headers['content-length']).toBe(String(Buffer.byteLength(first.text)));
    expect(first.headers['x-request-id']).toBe('req-1');
    expect(first.headers['access-control-allow-origin']).toBe('*');
    expect(first.headers['x-powered-by']).toBe('Express');
    expect(first.headers.etag).toBeUndefined();
    expect(first.headers['idempotent-replayed']).toBeUndefined();

    const again = await deliver(id);
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual({ status: 'duplicate', id, result: { name: 'é✓', id } });
    expect(again.headers['content-length']).toBe(String(Buffer.byteLength(again.text)));
    expect(again.headers['x-request-id']).toBe('req-1');
  });

  test('a refused delivery: problem+json with its length, middleware headers kept', async () => {
    const res = await deliver(undefined);
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toBe('application/problem+json; charset=utf-8');
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(res.text)));
    expect(JSON.parse(res.text)).toMatchObject({ status: 400, field: 'idempotency-key' });
    expect(res.headers['x-request-id']).toBe('req-1');
  });

  test("a respond hook's own content type gets Express's charset; its 204 carries no body or type", async () => {
    const csv = await deliver(uniqueName('ans'), '{"amount":1,"shape":"csv"}');
    expect(csv.status).toBe(200);
    expect(csv.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(csv.text).toBe('a,b');
    expect(csv.headers['x-request-id']).toBe('req-1');

    const empty = await deliver(uniqueName('ans'), '{"amount":1,"shape":"empty"}');
    expect(empty.status).toBe(204);
    expect(empty.text).toBe('');
    expect(empty.headers['content-type']).toBeUndefined();
    expect(empty.headers['x-request-id']).toBe('req-1');
  });

  test('the health probe answers GET and HEAD through Express (HEAD without a body)', async () => {
    const get = await request(app).get('/webhooks/health');
    expect(get.status).toBe(200);
    expect(get.headers['content-type']).toMatch(/^application\/json; charset=utf-8/);
    const head = await request(app).head('/webhooks/health');
    expect(head.status).toBe(200);
    expect(head.text ?? '').toBe('');
    expect(head.headers['content-length']).toBe(get.headers['content-length']);
  });
});
