/**
 * Deferred mode's workers take unordered pending events in batches (`workerBatchSize`): one
 * transaction takes several, each runs under its own savepoint, and they commit together
 * (src/background/turns.ts `applyDuePending`). What must stay true, on real PostgreSQL: a handler that throws
 * undoes only its own event, which is retried and dead-lettered as ever, while its batch-mates
 * apply once; lanes of several instances apply every event exactly once; a batch whose
 * transaction dies leaves every one of its events pending, and none remembered as processed.
 * That the events shared one transaction is read from the handler (`txid_current()` is the
 * top-level transaction's id, inside a savepoint too).
 */
import { sql, type Transaction } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../examples/ledger/ledger.js';
import { createInbox, type Handler, type Inbox, type InboxOptions } from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';

invariantsHoldAfterEach();

let n = 0;
const uid = (label: string) => `${label}-${process.pid}-${++n}`;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

describe.runIf(postgresTarget)('workers applying pending events in batches (PostgreSQL)', () => {
  let t: TargetDb;
  let ledger: Ledger;
  const inboxes: Inbox[] = [];
  afterEach(async () => {
    await Promise.all(inboxes.splice(0).map((i) => i.close()));
    await t?.close();
  });

  /** Each event's top-level transaction id, as its last run saw it. */
  const transactionOf = new Map<string, string>();
  /** The ledger's handler, recording the transaction each run is in; `before` runs first. */
  const ledgerHandler =
    (before: (id: string, tx: Transaction<any>) => Promise<void> = async () => {}): Handler =>
    async (event, ctx) => {
      const { rows } = await sql<{ xid: string }>`select txid_current()::text as xid`.execute(ctx.tx);
      transactionOf.set(event.id, rows[0]!.xid);
      await before(event.id, ctx.tx);
      return ledger.handle(event as Parameters<Ledger['handle']>[0], ctx);
    };

  const inboxOn = (db: TargetDb['db'], options: Omit<InboxOptions, 'db'>) => {
    const inbox = createInbox({
      db,
      schema: t.schema,
      mode: 'deferred',
      sweepIntervalMs: 0,
      pollIntervalMs: 20,
      logger: quiet,
      ...options,
    });
    inboxes.push(inbox);
    return watchInvariants(inbox);
  };

  const deliver = (inbox: Inbox, id: string, amount = 1) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: Buffer.from(JSON.stringify({ amount })),
    });

  /** Stores `ids` as pending through an inbox that applies nothing (workers: 0). */
  async function acknowledged(ids: string[]): Promise<Inbox> {
    const acker = inboxOn(t.db, { workers: 0, handle: () => {} });
    await ledger.setup(await acker.kysely());
    for (let i = 0; i < ids.length; i += 25) {
      const statuses = await Promise.all(
        ids.slice(i, i + 25).map(async (id) => (await deliver(acker, id)).status),
      );
      expect(new Set(statuses)).toEqual(new Set([202]));
    }
    return acker;
  }

  async function entries(inbox: Inbox): Promise<string[]> {
    return (await ledger.account(await inbox.kysely(), 'none')).entries.map((e) => e.id).sort();
  }

  async function until(what: string, done: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error(`not ${what} after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('a handler that throws mid-batch: the others apply once, in one transaction; it is retried, then dead-lettered', async () => {
    t = await postgresTarget!.open();
    ledger = new Ledger(t.appSchema);
    const ids = [uid('b1'), uid('b2'), uid('b3'), uid('b4'), uid('b5')];
    const [e1, e2, e3, e4, e5] = ids as [string, string, string, string, string];
    const acker = await acknowledged(ids);
    let failOnce = true;
    // One lane: it takes the five due events in one batch when it starts.
    const worker = inboxOn(t.another(), {
      workers: 1,
      workerBatchSize: 5,
      maxAttempts: 3,
      retryBaseMs: 1,
      retryCapMs: 5,
      handle: ledgerHandler(async (id, tx) => {
        // A write first, so that rolling back to the event's savepoint has something to undo.
        await ledger.credit(tx, 'none', `${id}-extra`, null, 100);
        if (id === e2) throw new Error('always');
        if (id === e4 && failOnce) {
          failOnce = false;
          throw new Error('once');
        }
      }),
    });
    await worker.ready();
    await until('settled', async () => {
      await worker.idle();
      return (await worker.event(e2))?.status === 'dead' && (await worker.event(e4))?.status === 'processed';
    });
    // Each applied once; no failed run's writes survived (not even its write before the throw).
    expect(await entries(acker)).toEqual(
      [e1, e3, e4, e5, `${e1}-extra`, `${e3}-extra`, `${e4}-extra`, `${e5}-extra`].sort(),
    );
    expect((await ledger.account(await acker.kysely(), 'none')).balance).toBe(404);
    expect(await worker.event(e2)).toMatchObject({ status: 'dead', attempts: 3, deadReason: 'poison' });
    expect(await worker.event(e4)).toMatchObject({
      status: 'processed',
      attempts: 1,
      result: { balance: 404 },
    });
    // e2's throw did not end its batch: e1 and e3 committed in one transaction. (The batch may stop
    // later, once its handlers ran the batch budget, on a machine busy enough to take that long.)
    expect(transactionOf.get(e3)).toBe(transactionOf.get(e1));
    expect(transactionOf.get(e4)).not.toBe(transactionOf.get(e1));
    // Every applied one is a duplicate now, answered with its result.
    for (const id of [e1, e3, e5]) expect((await deliver(worker, id)).kind).toBe('duplicate');
  });

  it('lanes of two inboxes over one schema apply 1000 events exactly once, some in batches, under redeliveries', async () => {
    t = await postgresTarget!.open();
    ledger = new Ledger(t.appSchema);
    const backlog = Array.from({ length: 500 }, (_, i) => uid(`bl${i}`));
    const acker = await acknowledged(backlog);
    const handle = ledgerHandler();
    const a = inboxOn(t.another(), { workers: 4, workerBatchSize: 10, handle });
    const b = inboxOn(t.another(), { workers: 4, workerBatchSize: 10, handle });
    await Promise.all([a.ready(), b.ready()]);
    // While they work through the backlog, each acknowledges 250 new events and the other's
    // redeliveries of the backlog: a redelivery of an event a batch holds waits for the batch.
    const fresh = Array.from({ length: 500 }, (_, i) => uid(`fr${i}`));
    const statuses = new Set<number>();
    await Promise.all(
      [a, b].map(async (inbox, k) => {
        for (let i = k; i < 500; i += 2) {
          statuses.add((await deliver(inbox, fresh[i]!)).status);
          statuses.add((await deliver(inbox, backlog[i]!)).status);
        }
      }),
    );
    expect([...statuses].every((s) => [200, 202, 409].includes(s))).toBe(true);
    const all = [...backlog, ...fresh].sort();
    await until(
      'all applied',
      async () => {
        await Promise.all([a.idle(), b.idle()]);
        return (await entries(acker)).length >= all.length;
      },
      60_000,
    );
    expect(await entries(acker)).toEqual(all);
    expect((await ledger.account(await acker.kysely(), 'none')).balance).toBe(1000);
    const db = await acker.kysely();
    const { rows } = await sql<{ status: string; n: number }>`
      select status, count(*)::int as n from ${sql.table(`${t.schema}.events`)} group by status`.execute(db);
    expect(rows).toEqual([{ status: 'processed', n: 1000 }]);
    // Batches happened: fewer transactions than events (every lane's first take is a batch of 10).
    expect(new Set(all.map((id) => transactionOf.get(id))).size).toBeLessThan(1000);
  });

  it('a batch whose transaction dies leaves all its events pending: none applied, none remembered, then each applied once', async () => {
    t = await postgresTarget!.open();
    ledger = new Ledger(t.appSchema);
    const ids = [uid('k1'), uid('k2'), uid('k3'), uid('k4')];
    const acker = await acknowledged(ids);
    let entered!: (pid: number) => void;
    const inThird = new Promise<number>((resolve) => (entered = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let first = true;
    const worker = inboxOn(t.another(), {
      workers: 1,
      workerBatchSize: 4,
      pollIntervalMs: 50,
      handle: ledgerHandler(async (id, tx) => {
        if (id !== ids[2] || !first) return;
        first = false;
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(tx);
        entered(rows[0]!.pid);
        await released;
      }),
    });
    await worker.ready();
    // Two events applied in the batch (not committed), the third's handler waiting: kill it.
    const pid = await inThird;
    const admin = new pg.Pool({ connectionString: postgresUrl! });
    try {
      await admin.query('select pg_terminate_backend($1)', [pid]);
      await until('the backend gone', async () => {
        const { rows } = await admin.query('select 1 from pg_stat_activity where pid = $1', [pid]);
        return rows.length === 0;
      });
    } finally {
      await admin.end();
    }
    for (const id of ids) expect(await acker.event(id)).toMatchObject({ status: 'pending', attempts: 0 });
    expect(await entries(acker)).toEqual([]);
    // Not remembered as processed: a redelivery of an event whose handler ran is still pending.
    expect((await deliver(worker, ids[0]!)).body).toMatchObject({ status: 'pending' });
    release();
    await until('applied', async () => {
      await worker.idle();
      return (await entries(acker)).length === ids.length;
    });
    expect(await entries(acker)).toEqual([...ids].sort());
    for (const id of ids) expect(await acker.event(id)).toMatchObject({ status: 'processed', attempts: 0 });
  });
});
