/**
 * Typed handlers. `createInbox<DB, Body>()` and the adapters' `inbox<DB, Body>()` type the
 * handler's `tx` as `Transaction<DB>` and `event.body` as `Body`; a wrong column name does not
 * compile (the `@ts-expect-error` lines below fail `npm run typecheck` if it ever does). The
 * inbox's own table types match the tables the migrations create, and its statements read rows
 * of the types they declare.
 */
import type { Generated, Transaction } from 'kysely';
import { sql } from 'kysely';
import type Stripe from 'stripe';
import { describe, expect, expectTypeOf, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { handler as fetchHandler } from '../adapters/fetch.js';
import { inbox as honoInbox } from '../adapters/hono.js';
import { inbox as koaInbox } from '../adapters/koa.js';
import { StatementNames } from '../src/db/drivers/common.js';
import { createTables, defineStatement, type Queryable } from '../src/db/sql/tables.js';
import {
  createInbox,
  type EventMapOf,
  type Handlers,
  type InboxDatabase,
  type InboxEventsTable,
  type InboxGapsTable,
  type InboxKeysTable,
} from '../src/index.js';
import { filePGlite, pgliteTarget } from './support/databases.js';

/** Column names of each table, as the migrations create them. */
const INBOX_COLUMNS = {
  events: [
    'source',
    'id',
    'key',
    'seq',
    'body_hash',
    'status',
    'payload',
    'headers',
    'result',
    'attempts',
    'last_error',
    'dead_reason',
    'run_after',
    'received_at',
    'processed_at',
    'type',
    'cause',
    'failed_at',
    'stream',
    'group_key',
  ] satisfies (keyof InboxEventsTable)[],
  keys: [
    'source',
    'key',
    'next_seq',
    'state',
    'blocked_seq',
    'blocked_reason',
    'updated_at',
    'last_version',
    'stream',
  ] satisfies (keyof InboxKeysTable)[],
  gaps: [
    'source',
    'key',
    'from_seq',
    'to_seq',
    'reason',
    'created_at',
    'stream',
  ] satisfies (keyof InboxGapsTable)[],
} as const;

/** The database of this file's inboxes that need one only to exist (see filePGlite). */
const memory = filePGlite();

/** A user's database interface, as kysely-codegen writes it. */
interface DB {
  payments: { id: string; amount: number; created_at: Generated<Date> };
}
interface Payment {
  amount: number;
  currency: 'EUR' | 'USD';
}

describe('typed handlers', () => {
  test('createInbox<DB, Body>: tx is Transaction<DB>, event.body is Body; a wrong column fails to compile', () => {
    const options = {
      db: memory(),
      migrate: false,
      async handle(event: { body: Payment; id: string }, { tx }: { tx: Transaction<DB> }) {
        await tx.insertInto('payments').values({ id: event.id, amount: event.body.amount }).execute();
        // @ts-expect-error: `amout` is not a column of payments
        tx.insertInto('payments').values({ id: event.id, amout: 1 });
        // @ts-expect-error: `refunds` is not a table of DB
        tx.selectFrom('refunds');
      },
    };
    expectTypeOf(options.handle).parameter(1).toHaveProperty('tx').toEqualTypeOf<Transaction<DB>>();
    const inbox = createInbox<DB, Payment>({
      db: memory(),
      migrate: false,
      handle(event, { tx }) {
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
        expectTypeOf(event.body).toEqualTypeOf<Payment>();
        // @ts-expect-error: `amout` is not a column of payments
        tx.selectFrom('payments').select('amout');
        // @ts-expect-error: currency is 'EUR' | 'USD'
        const yen: typeof event.body.currency = 'JPY';
        return { yen };
      },
    });
    expect(inbox).toBeDefined();
  });

  test("the adapters' inbox<DB, Body>() type the handler the same way", () => {
    const handle = (name: string) => ({
      db: memory(),
      migrate: false,
      path: `/${name}`,
    });
    const express = expressInbox<DB, Payment>({
      ...handle('e'),
      handle(event, { tx }) {
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
        expectTypeOf(event.body).toEqualTypeOf<Payment>();
      },
    });
    const koa = koaInbox<DB, Payment>({
      ...handle('k'),
      handle(event, { tx }) {
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
        expectTypeOf(event.body).toEqualTypeOf<Payment>();
      },
    });
    const hono = honoInbox<DB, Payment>({
      ...handle('h'),
      handle(event, { tx }) {
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
        expectTypeOf(event.body.currency).toEqualTypeOf<'EUR' | 'USD'>();
        // @ts-expect-error: `amout` is not a column of payments
        tx.updateTable('payments').set({ amout: 2 });
      },
    });
    const fetch = fetchHandler<DB, Payment>({
      ...handle('f'),
      handle(_event, { tx }) {
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
      },
    });
    expect([express, koa, hono, fetch].every((h) => typeof h === 'function')).toBe(true);
  });
});

describe('handlers typed by a map of event types', () => {
  type StripeEventMap = EventMapOf<Stripe.Event>;
  /** A map written by hand, with Shopify's `/` separator. */
  interface ShopMap {
    'orders/create': { id: number; total_price: string };
    'orders/paid': { id: number; total_price: string; paid_at: string };
    'refunds/create': { id: number; order_id: number };
  }

  test('each handler gets the body of the types it can receive; a wrong field or pattern fails to compile', () => {
    const stripeHandlers = {
      'invoice.paid': async (event, { tx }) => {
        expectTypeOf(event.body).toEqualTypeOf<Stripe.InvoicePaidEvent>();
        expectTypeOf(tx).toEqualTypeOf<Transaction<DB>>();
        await tx
          .insertInto('payments')
          .values({ id: event.id, amount: event.body.data.object.amount_paid })
          .execute();
        // @ts-expect-error: an invoice has no `amount_captured` (a charge has)
        return event.body.data.object.amount_captured;
      },
      'customer.*': (event) => {
        expectTypeOf(event.body).toEqualTypeOf<
          StripeEventMap['customer.created' | 'customer.updated' | 'customer.deleted']
        >();
        // @ts-expect-error: one level: customer.subscription.created is not in customer.*
        const deeper: 'customer.subscription.created' = event.body.type;
        return deeper;
      },
      '*': (event) => {
        expectTypeOf(event.body).toEqualTypeOf<Stripe.Event>();
        expectTypeOf(event.type).toEqualTypeOf<string | null>();
      },
      // @ts-expect-error: Stripe sends no `invoice.payed`
      'invoice.payed': () => null,
    } satisfies Handlers<StripeEventMap, DB>;
    const shop = {
      'orders/*': (event) => {
        expectTypeOf(event.body).toEqualTypeOf<ShopMap['orders/create'] | ShopMap['orders/paid']>();
        // @ts-expect-error: paid_at is only on orders/paid
        return event.body.paid_at;
      },
    } satisfies Handlers<ShopMap>;
    const inbox = createInbox<DB>({ db: memory(), migrate: false, handlers: stripeHandlers });
    const untyped = createInbox({
      db: memory(),
      migrate: false,
      handlers: { ...shop, 'any.thing': (e) => e.body.x },
    });
    expect([inbox, untyped].every((i) => i.options.handle === undefined)).toBe(true);
  });
});

describe("the inbox's own table types", () => {
  test('name every column of each table, and only those', async () => {
    expectTypeOf<(typeof INBOX_COLUMNS.events)[number]>().toEqualTypeOf<keyof InboxEventsTable>();
    expectTypeOf<(typeof INBOX_COLUMNS.keys)[number]>().toEqualTypeOf<keyof InboxKeysTable>();
    expectTypeOf<(typeof INBOX_COLUMNS.gaps)[number]>().toEqualTypeOf<keyof InboxGapsTable>();
    expectTypeOf<InboxDatabase<'billing', 'wh_'>>().toHaveProperty('billing.wh_events');

    const db = await pgliteTarget.open();
    const inbox = createInbox({
      db: db.db,
      schema: db.schema,
      tablePrefix: 'wh_',
      handle: () => {},
      sweepIntervalMs: 0,
    });
    try {
      const kysely = await inbox.kysely();
      for (const table of ['events', 'keys', 'gaps'] as const) {
        const { rows } = await sql<{ column_name: string }>`
          select column_name from information_schema.columns
          where table_schema = ${db.schema} and table_name = ${`wh_${table}`}`.execute(kysely);
        expect(rows.map((r) => r.column_name).sort(), table).toEqual([...INBOX_COLUMNS[table]].sort());
      }
    } finally {
      await inbox.close();
      await db.close();
    }
  });
});

describe("the inbox's statements", () => {
  test('read the row type each declares beside its text: a misspelt column fails to compile', async () => {
    const names = new StatementNames();
    const t = createTables('webhook_inbox', '');
    const received = defineStatement<{ received_at: unknown }>(
      names,
      t,
      'probe',
      'select now() as received_at',
    );
    const written = defineStatement(names, t, 'probe_write', 'select');
    const read = async (db: Queryable) => {
      const [row] = await received.run(db, []);
      // @ts-expect-error: `recieved_at` is not a column the statement reads
      const misspelt = row?.recieved_at;
      const [none] = await written.run(db, []);
      // @ts-expect-error: a statement that declares no row type has no columns to read
      const column = none.id;
      return [row?.received_at, misspelt, column];
    };
    expectTypeOf(read).returns.resolves.items.toEqualTypeOf<unknown>();
    const db = await pgliteTarget.open();
    const inbox = createInbox({ db: db.db, schema: db.schema, migrate: false, handle: () => {} });
    try {
      const [at] = await read(await inbox.kysely());
      expect(at).toBeInstanceOf(Date);
    } finally {
      await inbox.close();
      await db.close();
    }
  });
});
