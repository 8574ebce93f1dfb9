/**
 * The NestJS example (examples/nestjs): Nest on Express with `rawBody: true`, so Nest's JSON
 * parser runs first and the inbox takes `req.rawBody`. Driven with supertest: a duplicate is
 * replayed without a second note, an out-of-order pair is applied in seq order, and the notes
 * are read back.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createNestApp } from '../examples/nestjs/app.js';
import type { Inbox } from '../src/index.js';
import { type Target, targets, uniqueName } from './support/databases.js';

describe.each(targets)('the NestJS example on $name', (target: Target) => {
  const schema = uniqueName('wi');
  const appSchema = uniqueName('app');
  let app: Awaited<ReturnType<typeof createNestApp>>['app'];
  let inbox: Inbox;
  let close: () => Promise<void>;
  beforeAll(async () => {
    const db = await target.open();
    ({ app, inbox } = await createNestApp({ appSchema, inbox: { db: db.db, schema, sweepIntervalMs: 0 } }));
    await app.init();
    close = async () => {
      await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(appSchema)} cascade`.execute(
        await inbox.kysely(),
      );
      await app.close();
      await db.close();
    };
  });
  afterAll(async () => {
    await close?.();
  });

  const post = (headers: Record<string, string>, body: unknown) =>
    request(app.getHttpServer())
      .post('/webhooks')
      .set(headers)
      .send(body as object);
  const notes = async (where: (n: { event_id: string; key: string | null }) => boolean) => {
    const { rows } = await sql<{ event_id: string; key: string | null; seq: number | null; note: string }>`
      select event_id, key, seq, note from ${sql.table(`${appSchema}.notes`)} order by n`.execute(
      await inbox.kysely(),
    );
    return rows.filter(where);
  };

  test('a JSON delivery Nest already parsed is applied from req.rawBody; a duplicate is replayed', async () => {
    const id = `evt_${randomUUID()}`;
    const first = await post({ 'idempotency-key': id }, { note: 'once' });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ status: 'processed', result: { noted: id } });
    const again = await post({ 'idempotency-key': id }, { note: 'once' });
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toMatchObject({ result: { noted: id } });
    expect(await notes((n) => n.event_id === id)).toHaveLength(1);
  });

  test('an out-of-order pair is held, then applied in seq order', async () => {
    const key = `order_${randomUUID()}`;
    const second = await post(
      { 'idempotency-key': `${key}-2`, 'x-key': key, 'x-seq': '2' },
      { note: 'shipped' },
    );
    expect(second.status).toBe(202);
    const first = await post({ 'idempotency-key': `${key}-1`, 'x-key': key, 'x-seq': '1' }, { note: 'paid' });
    expect(first.status).toBe(200);
    await inbox.idle();
    expect((await notes((n) => n.key === key)).map((n) => [n.seq, n.note])).toEqual([
      [1, 'paid'],
      [2, 'shipped'],
    ]);
  });

  test('GET /webhooks/health is the probe; PUT /webhooks is 405', async () => {
    expect((await request(app.getHttpServer()).get('/webhooks/health')).status).toBe(200);
    const put = await request(app.getHttpServer()).put('/webhooks').send({});
    expect(put.status).toBe(405);
    expect(put.headers.allow).toBe('POST');
  });
});
