/**
 * A duplicate answered from the in-process cache is not parsed once a copy of its bytes parsed
 * (processed-cache.ts): these pin that nothing a sender sees changes. A copy is refused for its
 * body or content type exactly as without the cache, until a copy of the same bytes parsed;
 * and a copy the cache does not answer after all (another key) still reaches the handler with
 * its parsed body.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createInbox, type Inbox, type InboxOptions } from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;

describe(`cached duplicates and their body (${target.name})`, () => {
  let db: TargetDb;
  const inboxes: Inbox[] = [];
  const schemas: string[] = [];
  /** Per event id, the bodies its handler runs saw. */
  const bodies = new Map<string, unknown[]>();

  function open(options: Partial<InboxOptions> = {}): { inbox: Inbox; schema: string } {
    const schema = uniqueName('wi');
    schemas.push(schema);
    const inbox = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      handle: (event) => {
        bodies.set(event.id, [...(bodies.get(event.id) ?? []), event.body]);
        return { ok: true };
      },
      ...options,
    });
    inboxes.push(inbox);
    return { inbox, schema };
  }

  const deliver = (inbox: Inbox, id: string, type: string, body: string, more: Record<string, string> = {}) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': type, ...more },
      rawBody: Buffer.from(body),
    });

  beforeAll(async () => {
    db = await target.open();
  });
  afterAll(async () => {
    for (const inbox of inboxes) await inbox.close();
    if (target.name === 'postgres') {
      const { default: pg } = await import('pg');
      for (const s of schemas)
        await (db.db as InstanceType<typeof pg.Pool>).query(`drop schema if exists "${s}" cascade`);
    }
    await db?.close();
  });

  test('bytes accepted raw, then sent as JSON: still 400 for the body, not a duplicate', async () => {
    const { inbox } = open();
    const id = uniqueName('raw');
    expect(await deliver(inbox, id, 'text/plain', 'not json')).toMatchObject({
      status: 200,
      kind: 'processed',
    });
    for (let i = 0; i < 3; i++) {
      expect(await deliver(inbox, id, 'application/json', 'not json')).toMatchObject({
        status: 400,
        kind: 'invalid',
        body: { field: 'body' },
      });
    }
    expect(await deliver(inbox, id, 'text/plain', 'not json')).toMatchObject({
      status: 200,
      kind: 'duplicate',
    });
    // A copy answered from the cache with its bytes unparsed teaches it nothing.
    expect(await deliver(inbox, id, 'application/json', 'not json')).toMatchObject({ status: 400 });
    expect(bodies.get(id)).toEqual([Buffer.from('not json')]);
  });

  test("parse: 'json' still refuses another content type for a copy whose bytes parsed", async () => {
    const { inbox } = open({ parse: 'json' });
    const id = uniqueName('json');
    for (let i = 0; i < 3; i++) {
      expect((await deliver(inbox, id, 'application/json', '{"n":1}')).status).toBe(200);
    }
    expect(await deliver(inbox, id, 'text/plain', '{"n":1}')).toMatchObject({
      status: 400,
      body: { field: 'content-type' },
    });
    expect(bodies.get(id)).toEqual([{ n: 1 }]);
  });

  test('a copy the cache does not answer (another key, its row pruned) reaches the handler with its body', async () => {
    const { inbox, schema } = open();
    const id = uniqueName('miss');
    expect(await deliver(inbox, id, 'application/json', '{"n":1}')).toMatchObject({ kind: 'processed' });
    // Two copies answered from the cache: the second is the one not parsed.
    expect(await deliver(inbox, id, 'application/json', '{"n":1}')).toMatchObject({ kind: 'duplicate' });
    expect(await deliver(inbox, id, 'application/json', '{"n":1}')).toMatchObject({ kind: 'duplicate' });
    // As retention would: the processed row is gone, the cache still has the id.
    await sql`delete from ${sql.table(`${schema}.events`)} where id = ${id}`.execute(await inbox.kysely());
    const ordered = await deliver(inbox, id, 'application/json', '{"n":1}', { 'x-key': 'k', 'x-seq': '1' });
    expect(ordered).toMatchObject({ status: 200, kind: 'processed' });
    expect(bodies.get(id)).toEqual([{ n: 1 }, { n: 1 }]);
  });
});
