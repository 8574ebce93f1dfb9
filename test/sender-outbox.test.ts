import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { startLedger } from '../examples/ledger/start.js';
import { createSender, type Sender } from '../src/sender/index.js';
import { createFaultProxy } from '../src/testing/index.js';
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

    const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/outbox-sender-child.ts'], {
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
