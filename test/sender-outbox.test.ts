import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { CompiledQuery, sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { startLedger } from '../examples/ledger/start.js';
import { StatementNames } from '../src/db/drivers/common.js';
import { createSender, InvalidEventError, OutboxStore, type Sender } from '../src/sender/index.js';
import { outboxStatements } from '../src/sender/outbox.js';
import { outboxTables } from '../src/sender/outbox-schema.js';
import { createFaultProxy } from '../src/testing/index.js';
import { childScript } from './support/child-scripts.js';
import { postgresTarget, postgresUrl, targets, uniqueName } from './support/databases.js';
import { recordingServer } from './support/recording-server.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

describe.each(targets)('outbox on $name', (target) => {
  it('delivers what a producer enqueued in a committed transaction, never what it rolled back', async () => {
    const t = await target.open();
    cleanups.push(() => t.close());
    const server = await recordingServer();
    cleanups.push(server.close);
    const sender: Sender = createSender({
      endpoint: server.url,
      db: t.db,
      schema: t.schema,
      pollIntervalMs: 20,
      breaker: false,
    });
    cleanups.push(() => sender.close());
    const db = await sender.kysely();
    await db.schema.createSchema(t.appSchema).execute();
    await db.schema.withSchema(t.appSchema).createTable('orders').addColumn('id', 'text').execute();

    for (let i = 1; i <= 6; i++) {
      const rollBack = i % 3 === 0;
      await db
        .transaction()
        .execute(async (tx) => {
          await tx
            .withSchema(t.appSchema)
            .insertInto('orders')
            .values({ id: `o${i}` })
            .execute();
          const e = await sender.enqueue(tx, { id: `order-${i}`, key: 'acct', body: { order: i } });
          if (rollBack) throw new Error('rolled back on purpose');
          return e;
        })
        .catch((err) => {
          if (!rollBack) throw err;
        });
    }
    await sender.idle();
    // Only committed events, each with the seq it got in its transaction: 1..4, no holes
    // where the rolled-back ones were.
    expect(server.arrivals.map((a) => [a.id, a.seq])).toEqual([
      ['order-1', 1],
      ['order-2', 2],
      ['order-4', 3],
      ['order-5', 4],
    ]);
    expect(JSON.parse(server.arrivals[0].body.toString())).toEqual({ order: 1 });
    // Enqueueing an id again stores nothing new.
    expect(await sender.enqueue({ id: 'order-1', key: 'acct', body: { order: 1 } })).toMatchObject({
      created: false,
      seq: 1,
    });
  });
});

describe.each(targets)('a refused seq inside a producer transaction, on $name', (target) => {
  it('is an InvalidEventError, and the producer transaction goes on and commits', async () => {
    const t = await target.open();
    cleanups.push(() => t.close());
    const sender = createSender({
      endpoint: 'http://127.0.0.1:9/',
      db: t.db,
      schema: t.schema,
      dispatch: false,
    });
    cleanups.push(() => sender.close());
    const db = await sender.kysely();
    await db.schema.createSchema(t.appSchema).execute();
    await db.schema.withSchema(t.appSchema).createTable('orders').addColumn('id', 'text').execute();
    await sender.enqueue({ id: 'o5', key: 'acct', seq: 5, body: {} });
    await db.transaction().execute(async (tx) => {
      const error = await sender.enqueue(tx, { id: 'o3', key: 'acct', seq: 3, body: {} }).catch((e) => e);
      expect(error).toBeInstanceOf(InvalidEventError);
      expect(error.field).toBe('seq');
      await tx.withSchema(t.appSchema).insertInto('orders').values({ id: 'o6' }).execute();
      expect(await sender.enqueue(tx, { id: 'o6', key: 'acct', body: {} })).toMatchObject({
        created: true,
        seq: 6,
      });
    });
    const orders = await db.withSchema(t.appSchema).selectFrom('orders').select('id').execute();
    expect(orders).toEqual([{ id: 'o6' }]);
  });
});

describe.skipIf(!postgresTarget)('outbox across a sender crash (real PostgreSQL)', () => {
  it('loses nothing when the sender is killed mid-delivery: every event applied exactly once, in order', async () => {
    const t = await postgresTarget!.open();
    cleanups.push(() => t.close());
    const outboxSchema = uniqueName('outbox');
    cleanups.push(async () => {
      const pg = await import('pg');
      const c = new pg.default.Client({ connectionString: postgresUrl! });
      await c.connect();
      await c.query(`drop schema if exists "${outboxSchema}" cascade`);
      await c.end();
    });
    const ledger = await startLedger({
      ledgerSchema: t.appSchema,
      inbox: { db: t.db, schema: t.schema, sweepIntervalMs: 0 },
    });
    cleanups.push(() => ledger.close());
    // A slow network, so the crash lands while deliveries are in flight.
    const proxy = await createFaultProxy({ target: ledger.url, rates: { delay: 1 }, maxDelayMs: 30 });
    cleanups.push(() => proxy.close());

    // The producer: an enqueue-only sender.
    const producer = createSender({
      endpoint: `${proxy.url}/webhooks`,
      db: postgresUrl!,
      schema: outboxSchema,
      dispatch: false,
    });
    cleanups.push(() => producer.close());
    const db = await producer.kysely();
    const keys = 20;
    const events = 300;
    await db.transaction().execute(async (tx) => {
      for (let i = 0; i < events; i++) {
        await producer.enqueue(tx, { id: `ev-${i}`, key: `acct-${i % keys}`, body: { amount: i + 1 } });
      }
    });

    const child = spawn(process.execPath, [childScript('test/support/outbox-sender-child.ts')], {
      env: {
        ...process.env,
        ENDPOINT: `${proxy.url}/webhooks`,
        DATABASE_URL: postgresUrl!,
        OUTBOX_SCHEMA: outboxSchema,
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    cleanups.push(async () => child.kill('SIGKILL'));
    const exited = once(child, 'exit');
    // Kill it once a good share has gone through, mid-flight.
    while (proxy.stats().forwarded < events / 3) {
      if (child.exitCode !== null) throw new Error('the sender process died on its own');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    child.kill('SIGKILL');
    await exited;
    const leased = await db
      .withSchema(outboxSchema)
      .selectFrom('events')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('status', '=', 'pending')
      .where('locked_until', 'is not', null)
      .executeTakeFirstOrThrow();
    const deliveredBefore = await db
      .withSchema(outboxSchema)
      .selectFrom('events')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('status', '=', 'delivered')
      .executeTakeFirstOrThrow();
    expect(Number(deliveredBefore.n)).toBeGreaterThan(0);
    expect(Number(deliveredBefore.n)).toBeLessThan(events);

    // The restarted sender: picks up what was never sent, and what was in flight once the
    // dead sender's leases expire.
    const restarted = createSender({
      endpoint: `${proxy.url}/webhooks`,
      db: postgresUrl!,
      schema: outboxSchema,
      concurrency: 8,
      timeoutMs: 1000,
      leaseMs: 1500,
      pollIntervalMs: 50,
      breaker: false,
    });
    cleanups.push(() => restarted.close());
    await restarted.idle();
    await proxy.idle();
    await ledger.inbox.idle();

    const rows = await (await ledger.inbox.kysely())
      .withSchema(t.appSchema)
      .selectFrom('entries')
      .select(['key', 'event_id', 'seq', 'amount'])
      .orderBy('n')
      .execute();
    expect(rows).toHaveLength(events);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(events);
    for (let k = 0; k < keys; k++) {
      const ofKey = rows.filter((r) => r.key === `acct-${k}`);
      expect(ofKey.map((r) => Number(r.seq))).toEqual(ofKey.map((_, i) => i + 1));
      expect(ofKey.map((r) => r.event_id)).toEqual(
        Array.from({ length: events / keys }, (_, i) => `ev-${i * keys + k}`),
      );
    }
    const pending = await db
      .withSchema(outboxSchema)
      .selectFrom('events')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('status', '<>', 'delivered')
      .executeTakeFirstOrThrow();
    expect(Number(pending.n)).toBe(0);
    // Deliveries the dead sender had in flight were sent again; the inbox absorbed them.
    expect(Number(leased.n)).toBeGreaterThanOrEqual(0);
  });
});

/** Rows a plan touched: every node's output (times its loops) and the rows its filters threw away. */
function rowsTouched(node: any): number {
  const own =
    (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1) +
    (node['Rows Removed by Filter'] ?? 0) +
    (node['Rows Removed by Index Recheck'] ?? 0);
  return own + (node.Plans ?? []).reduce((sum: number, child: any) => sum + rowsTouched(child), 0);
}

describe.each(targets)('6. outbox cost does not grow with a blocked backlog, on $name', (target) => {
  it('claim and outstanding touch tens of rows with 2,000 events behind a dead letter and a slow head', async () => {
    const t = await target.open();
    cleanups.push(() => t.close());
    const store = await OutboxStore.open(t.db, { schema: t.schema, migrate: true, poolSize: 2 });
    cleanups.push(() => store.close());
    for (const key of ['dead', 'slow']) {
      for (let i = 0; i <= 1000; i++) {
        await store.add({
          id: `${key}-${i}`,
          key,
          seq: null,
          body: Buffer.from('{}'),
          contentType: 'application/json',
          headers: {},
        });
      }
    }
    const heads = await store.claim(10, 60_000);
    expect(heads.map((h) => h.id).sort()).toEqual(['dead-0', 'slow-0']);
    await store.deadLetter(heads.find((h) => h.key === 'dead')!, 'rejected', 'HTTP 400: no');
    await store.retryLater(heads.find((h) => h.key === 'slow')!, 3_600_000, 'HTTP 500: down', true);
    for (let i = 0; i < 5; i++) {
      await store.add({
        id: `u-${i}`,
        key: null,
        seq: null,
        body: Buffer.from('{}'),
        contentType: 'application/json',
        headers: {},
      });
    }
    // The slow key's head and its 1,000 followers will still go; the dead key's will not.
    expect(await store.outstanding()).toBe(1 + 1000 + 5);

    const statements = outboxStatements(store.tables, new StatementNames());
    const plan = async (text: string, parameters: unknown[]) => {
      const { rows } = await store.kysely.executeQuery<any>(
        CompiledQuery.raw(`explain (analyze, format json) ${text}`, parameters),
      );
      const json = rows[0]['QUERY PLAN'];
      return (typeof json === 'string' ? JSON.parse(json) : json)[0].Plan;
    };
    // As autovacuum would: 2,000 enqueues' churn leaves dead index entries until then.
    await sql`vacuum analyze ${sql.table(`${t.schema}.events`)}, ${sql.table(`${t.schema}.keys`)}`.execute(
      store.kysely,
    );
    // One row per key (two here) and the due heads: not the 2,000 queued events.
    expect(rowsTouched(await plan(statements.outstanding, []))).toBeLessThan(50);
    const claim = await plan(statements.claim, [16, 60_000, 'token']);
    expect(rowsTouched(claim)).toBeLessThan(50);
    expect(await store.deadLetters()).toHaveLength(1);
  });
});

describe.each(targets)('an outbox an unreleased version migrated, on $name', (target) => {
  it('is refused with the fix, and nothing runs', async () => {
    const t = await target.open();
    cleanups.push(() => t.close());
    const tables = outboxTables(t.schema);
    const bootstrap = createSender({
      endpoint: 'http://127.0.0.1:9/',
      db: t.db,
      schema: t.schema,
      migrate: false,
      dispatch: false,
    });
    cleanups.push(() => bootstrap.close());
    const db = await bootstrap.kysely();
    // The ledger such a commit left: names no release ships, and not the one it does.
    await sql
      .raw(
        `create schema "${t.schema}";
         create table ${tables.fn('migrations')} (name varchar(255) primary key, timestamp varchar(255) not null);
         create table ${tables.events} (id text primary key);
         insert into ${tables.fn('migrations')} (name, timestamp)
           values ('0001_outbox', 'x'), ('0002_heads_budget_retention', 'x');`,
      )
      .execute(db);
    await expect(OutboxStore.open(t.db, { schema: t.schema, migrate: true, poolSize: 2 })).rejects.toThrow(
      /^webhook-inbox\/sender: .*lists 0001_outbox, 0002_heads_budget_retention, .*lacks 0001_schema\..*Fix: drop it/,
    );
    const { rows } = await sql<{
      name: string;
    }>`select name from ${sql.raw(tables.fn('migrations'))} order by name`.execute(db);
    expect(rows.map((r) => r.name)).toEqual(['0001_outbox', '0002_heads_budget_retention']);
  });
});
