/**
 * A handler's write that fails only at COMMIT (a deferred constraint) rolls the whole
 * transaction back after the handler returned: nothing counts that attempt (docs/outcomes.md,
 * `failed`). Checked inside the handler (`set constraints all immediate`, the docs' example),
 * the violation is the handler's failure: counted, and dead-lettered after `maxAttempts`.
 */
import { type Kysely, sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const delivery = (id: string) => ({
  headers: { 'content-type': 'application/json', 'idempotency-key': id },
  rawBody: Buffer.from('{"orderId":42}'),
});

describe.each(targets)('a deferred constraint ($name)', (target) => {
  const database = perTestSchemas(target);
  let t: TargetDb;
  let inbox: Inbox | undefined;

  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await inbox?.close();
    inbox = undefined;
  });

  /** An inbox whose handler inserts a line item of an order that does not exist. */
  async function start(immediate: boolean): Promise<Inbox> {
    const app = t.appSchema;
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 3,
      handle: async (event, { tx }: { tx: Kysely<any> }) => {
        if (immediate) await sql`set constraints all immediate`.execute(tx);
        await sql`insert into ${sql.table(`${app}.line_items`)} (order_id) values (${event.body.orderId})`.execute(
          tx,
        );
      },
    });
    const kysely = await inbox.kysely();
    await sql`create schema ${sql.id(app)}`.execute(kysely);
    await sql`create table ${sql.table(`${app}.orders`)} (id int primary key)`.execute(kysely);
    await sql`create table ${sql.table(`${app}.line_items`)} (
      id serial primary key,
      order_id int references ${sql.table(`${app}.orders`)} deferrable initially deferred
    )`.execute(kysely);
    return inbox;
  }

  it('violated at COMMIT: 503 every time, no attempt counted, never dead-lettered', async () => {
    const inbox = await start(false);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await inbox.receive(delivery('order-line-1'))).status);
    expect(statuses).toEqual([503, 503, 503, 503]);
    expect(await inbox.event('order-line-1')).toBeUndefined();
  });

  it('checked in the handler (set constraints all immediate): 500, counted, dead-lettered after maxAttempts', async () => {
    const inbox = await start(true);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await inbox.receive(delivery('order-line-2'))).status);
    expect(statuses).toEqual([500, 500, 200, 200]);
    expect(await inbox.event('order-line-2')).toMatchObject({
      status: 'dead',
      attempts: 3,
      deadReason: 'poison',
    });
  });
});
