/**
 * A Kysely instance passed as `db` often carries plugins, CamelCasePlugin first among them. The
 * inbox's and the outbox's own statements run without them, since they read back the columns
 * their SQL names (`row_at_commit`, `received_at`, `r_seq`). The handler's `tx` and
 * `inbox.kysely()` keep them, as the application wrote its code for them.
 *
 * Before this, a CamelCasePlugin renamed `row_at_commit`. The inbox then took every new event's
 * row for written when it was not. A duplicate that missed the in-process cache (another
 * instance, a restart) was applied a second time, and so was an id reused with another body.
 * The outbox's `enqueue(tx, …)` refused every event.
 */
import { CamelCasePlugin, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { createSender } from '../src/sender/index.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';
import { recordingServer } from './support/recording-server.js';

invariantsHoldAfterEach();

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

/** The application's own Kysely instance, with CamelCasePlugin, over a pg pool. */
function applicationDb(): Kysely<any> {
  const pool = new pg.Pool({ connectionString: postgresUrl!, max: 10 });
  pool.on('error', () => {});
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }), plugins: [new CamelCasePlugin()] });
  cleanups.push(() => db.destroy());
  return db;
}

const delivery = (id: string, body: object) => ({
  headers: { 'content-type': 'application/json', 'idempotency-key': id },
  rawBody: Buffer.from(JSON.stringify(body)),
});

describe.runIf(postgresTarget)('a Kysely instance with CamelCasePlugin as `db`', () => {
  it('each event is applied once across instances, a reused id is 422, and the handler writes camelCase through its tx', async () => {
    const db = applicationDb();
    const schema = uniqueName('wi');
    const app = uniqueName('app');
    cleanups.push(() => sql`drop schema if exists ${sql.id(schema)}, ${sql.id(app)} cascade`.execute(db));
    await sql`create schema ${sql.id(app)}`.execute(db);
    await sql`create table ${sql.table(`${app}.orders`)} (event_id text primary key, order_total int not null)`.execute(
      db,
    );
    // Two instances on the same tables: the second has not seen the first's events, so its
    // in-process cache cannot answer for them; only the rows can.
    const start = (): Inbox => {
      const inbox = createInbox({
        db,
        schema,
        sweepIntervalMs: 0,
        handle: async (event, { tx }) => {
          // camelCase in, snake_case columns: only the application's plugin makes this work.
          await tx
            .insertInto(`${app}.orders`)
            .values({ eventId: event.id, orderTotal: event.body.total })
            .execute();
          return { total: event.body.total };
        },
      });
      cleanups.push(() => inbox.close());
      watchInvariants(inbox);
      return inbox;
    };
    const first = start();
    const second = start();
    expect(await first.kysely()).toBe(db);

    expect(await first.receive(delivery('order-1', { total: 5 }))).toMatchObject({
      status: 200,
      body: { status: 'processed', result: { total: 5 } },
    });
    expect(await second.receive(delivery('order-1', { total: 5 }))).toMatchObject({
      status: 200,
      body: { status: 'duplicate', result: { total: 5 } },
    });
    expect(await second.receive(delivery('order-1', { total: 7 }))).toMatchObject({ status: 422 });

    const orders = await db.selectFrom(`${app}.orders`).selectAll().execute();
    expect(orders).toEqual([{ eventId: 'order-1', orderTotal: 5 }]);
    const row = await second.event('order-1');
    expect(row).toMatchObject({ status: 'processed', attempts: 0, result: { total: 5 } });
    expect(row?.receivedAt).toBeInstanceOf(Date);
    expect(Number.isNaN(row!.receivedAt.getTime())).toBe(false);
  });

  it("the outbox's enqueue(tx, …) stores the event in the producer's transaction and delivers it", async () => {
    const db = applicationDb();
    const schema = uniqueName('wo');
    const app = uniqueName('app');
    cleanups.push(() => sql`drop schema if exists ${sql.id(schema)}, ${sql.id(app)} cascade`.execute(db));
    const server = await recordingServer();
    cleanups.push(server.close);
    const sender = createSender({ endpoint: server.url, db, schema, pollIntervalMs: 20, breaker: false });
    cleanups.push(() => sender.close());
    expect(await sender.kysely()).toBe(db);
    await sql`create schema ${sql.id(app)}`.execute(db);
    await sql`create table ${sql.table(`${app}.orders`)} (order_id text primary key)`.execute(db);

    const enqueued = await db.transaction().execute(async (tx) => {
      await tx.insertInto(`${app}.orders`).values({ orderId: 'o1' }).execute();
      return sender.enqueue(tx, { id: 'order-created-o1', key: 'acct', body: { orderId: 'o1' } });
    });
    expect(enqueued).toMatchObject({ id: 'order-created-o1', key: 'acct', seq: 1, created: true });
    await sender.idle();
    expect(server.arrivals.map((a) => [a.id, a.seq])).toEqual([['order-created-o1', 1]]);
  });
});
