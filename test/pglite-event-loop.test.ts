/**
 * PGlite is one Postgres session inside this process, and its calls resolve without waiting for
 * I/O: deliveries queued for the session could run back to back without the event loop coming
 * round, and no socket would be read, no connection accepted, until the whole queue was through
 * (under load, seconds: Node accepts one connection per pass of the event loop). The driver
 * takes at most one turn per pass (src/db/drivers/pglite.ts). Real PGlite, no timing: the order in
 * which things are answered.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { pgliteTarget, type TargetDb } from './support/databases.js';

const QUEUED = 40;

describe("PGlite's one session and the event loop", () => {
  let t: TargetDb;
  let inbox: Inbox;
  let applied: string;
  beforeAll(async () => {
    t = await pgliteTarget.open();
    applied = `"${t.appSchema}".applied`;
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: async (e, { tx }) => {
        await tx.executeQuery(CompiledQuery.raw(`insert into ${applied} (id) values ($1)`, [e.id]));
      },
    });
    const db = await inbox.kysely();
    await db.executeQuery(CompiledQuery.raw(`create schema "${t.appSchema}"`));
    await db.executeQuery(CompiledQuery.raw(`create table ${applied} (n serial primary key, id text)`));
  });
  afterAll(async () => {
    await inbox?.close();
    await t?.close();
  });

  const deliver = (id: string) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: Buffer.from('{"amount":1}'),
    });

  it('answers a request on a new connection while deliveries queue for the session, not after them, and keeps their order', async () => {
    // Warm: the inbox's tables and prepared statements exist before the queue forms.
    expect((await deliver('warm')).status).toBe(200);
    const server = createServer((_req, res) => res.end('pong'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      let settled = 0;
      const ids = Array.from({ length: QUEUED }, (_, i) => `queued-${i}`);
      const outcomes = ids.map((id) =>
        deliver(id).then((outcome) => {
          settled++;
          return outcome;
        }),
      );
      // A new connection: accepted, read and answered only when the event loop comes round.
      const settledWhenAnswered = await fetch(url, { headers: { connection: 'close' } }).then(async (res) => {
        expect(await res.text()).toBe('pong');
        return settled;
      });
      expect((await Promise.all(outcomes)).map((o) => o.status)).toEqual(ids.map(() => 200));
      // Answered while most of the queue still waited (it used to be answered after all of it).
      expect(settledWhenAnswered).toBeLessThan(QUEUED / 2);
      // The session's turns were taken in the order they were asked for.
      const rows = await (await inbox.kysely()).executeQuery<{ id: string }>(
        CompiledQuery.raw(`select id from ${applied} where id like 'queued-%' order by n`),
      );
      expect(rows.rows.map((r) => r.id)).toEqual(ids);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
