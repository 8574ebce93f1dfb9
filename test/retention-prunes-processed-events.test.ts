/**
 * Retention: processed rows older than `retention` are pruned in small batches by the sweeper
 * and by `prune()`; held and dead rows and the keys table never are, so a key's cursor keeps
 * answering an old ordered redelivery as a duplicate after its row is gone. Dead letters have a
 * retention of their own, `deadRetention` (default: kept), and a processed row's payload its own
 * switch, `keepPayload`: the three are independent.
 */
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { createInbox, type InboxOptions, InboxOptionsError } from '../src/index.js';
import { filePGlite, type TargetDb, targets } from './support/databases.js';
import { deliver } from './support/deliver.js';
import { perTestSchemas } from './support/per-test-schemas.js';

/** The database of this file's inboxes that need one only to exist (see filePGlite). */
const memory = filePGlite();

describe('the retention option', () => {
  it('is checked at construction, and shorter than 3 days warns once per process (and on every logger)', async () => {
    const handle = () => {};
    for (const retention of ['abc', '7', 500, -1, '1x']) {
      expect(() => createInbox({ db: 'memory', handle, retention } as any)).toThrow(InboxOptionsError);
      expect(() => createInbox({ db: 'memory', handle, retention } as any)).toThrow(
        /option `retention` must be/,
      );
      expect(() => createInbox({ db: 'memory', handle, deadRetention: retention } as any)).toThrow(
        /option `deadRetention` must be/,
      );
    }
    expect(() => createInbox({ db: 'memory', handle, onDeadLetter: 'slack' } as any)).toThrow(
      /option `onDeadLetter` must be a function/,
    );
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const logged: string[] = [];
      const logger = { warn: (_obj: object, msg?: string) => logged.push(msg ?? '') };
      createInbox({ db: memory(), handle, retention: '1d', logger });
      createInbox({ db: memory(), handle, retention: 36 * 3_600_000, logger });
      createInbox({ db: memory(), handle, retention: '3d', logger });
      createInbox({ db: memory(), handle, retention: false, logger });
      await new Promise((resolve) => setImmediate(resolve)); // process warnings are emitted on the next tick
      expect(logged).toHaveLength(2);
      expect(logged[0]).toContain('shorter than 3 days');
      expect(warnings.filter((w) => w.name === 'WebhookInboxWarning')).toHaveLength(1);
      expect(warnings[0].message).toContain('retention is 86400000 ms, shorter than 3 days');
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe.each(targets)('retention ($name)', (target) => {
  const database = perTestSchemas(target);
  let t: TargetDb;
  let server: LedgerServer | undefined;

  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function ageRows(ids: string[], days: number) {
    const db = await server!.inbox.kysely();
    await sql`update ${sql.table(`${t.schema}.events`)}
                 set processed_at = now() - ${days}::int * interval '1 day',
                     received_at = now() - ${days + 1}::int * interval '1 day'
               where id in (${sql.join(ids)})`.execute(db);
  }

  it('the sweeper prunes only old processed rows, keeps held and dead ones and the keys, and ordered dedup survives', async () => {
    server = await startLedger({
      ledgerSchema: t.appSchema,
      inbox: {
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        maxAttempts: 1,
        retention: '7d',
        // The held event is aged past any gap timeout: block rather than skip, so it stays held.
        onGapTimeout: 'block',
      },
    });
    const { url, ledger, inbox } = server;
    await deliver(url, 'u-old', { amount: 1 });
    await deliver(url, 'u-new', { amount: 1 });
    await deliver(url, 'r-1', { amount: 10 }, { key: 'acct-r', seq: 1 });
    await deliver(url, 'r-2', { amount: 20 }, { key: 'acct-r', seq: 2 });
    expect((await deliver(url, 'r-4', { amount: 40 }, { key: 'acct-r', seq: 4 })).status).toBe(202);
    ledger.failNext.set('acct-p', 1);
    expect((await deliver(url, 'p-1', { amount: 1 }, { key: 'acct-p', seq: 1 })).body.status).toBe(
      'dead-lettered',
    );
    // Old enough: three processed rows, and (older still) the held and the dead one.
    await ageRows(['u-old', 'r-1', 'r-2'], 8);
    await ageRows(['r-4', 'p-1'], 30);

    const report = await inbox.sweep();
    expect(report.pruned).toBe(3);
    const status = await inbox.status();
    expect(status.events).toEqual({ pending: 0, held: 1, processed: 1, dead: 1 });
    expect(await inbox.keyState('acct-r')).toMatchObject({ nextSeq: 3, heldSeqs: [4] });
    expect(await inbox.keyState('acct-p')).toMatchObject({ state: 'blocked', blockedSeq: 1 });

    // The key's cursor is the dedup record: a redelivery of a pruned ordered event is a
    // duplicate, with no side effect.
    for (const [id, seq] of [
      ['r-1', 1],
      ['r-2', 2],
    ] as const) {
      const again = await deliver(url, id, { amount: seq * 10 }, { key: 'acct-r', seq });
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ status: 'duplicate', id });
    }
    const account = await ledger.account(await inbox.kysely(), 'acct-r');
    expect(account.entries.map((e) => e.seq)).toEqual([1, 2]);
    expect(account.balance).toBe(30);

    // The sweeper prunes at most once a minute while it is caught up; prune() runs now.
    await ageRows(['u-new'], 8);
    expect((await inbox.sweep()).pruned).toBe(0);
    expect((await inbox.status()).events.processed).toBe(1);
    expect(await inbox.prune({ olderThan: '7d' })).toMatchObject({ pruned: 1, dryRun: false });
    expect((await inbox.status()).events.processed).toBe(0);
  });

  it('prune({ olderThan, dryRun }) counts without deleting, works in batches, and rejects a bad duration', async () => {
    server = await startLedger({
      ledgerSchema: t.appSchema,
      inbox: { db: t.db, schema: t.schema, sweepIntervalMs: 0, retention: false },
    });
    const { url, inbox } = server;
    const ids = Array.from({ length: 5 }, (_, i) => `b-${i}`);
    for (const id of ids) await deliver(url, id, { amount: 1 });
    await ageRows(ids.slice(0, 4), 2);

    // retention: false: the sweeper never prunes.
    expect((await inbox.sweep()).pruned).toBe(0);
    expect(await inbox.prune({ olderThan: '1d', dryRun: true })).toMatchObject({ pruned: 4, dryRun: true });
    expect((await inbox.status()).events.processed).toBe(5);
    expect(await inbox.prune({ olderThan: '3d' })).toMatchObject({ pruned: 0 });
    expect(await inbox.prune({ olderThan: 86_400_000, batchSize: 3 })).toMatchObject({ pruned: 4 });
    expect((await inbox.status()).events.processed).toBe(1);
    await expect(inbox.prune({ olderThan: 'soon' })).rejects.toThrow(/`olderThan` must be/);
  });

  it('deadRetention purges dead letters past their age, independently of retention and keepPayload', async () => {
    const open = (options: Partial<InboxOptions>) =>
      createInbox({
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        maxAttempts: 1,
        handle: (event) => {
          if ((event.body as { poison?: boolean }).poison) throw new Error('poison');
        },
        ...options,
      });
    const first = open({ retention: '7d', deadRetention: '30d', keepPayload: false });
    const body = (poison: boolean) => ({
      headers: { 'content-type': 'application/json' },
      rawBody: Buffer.from(JSON.stringify({ poison })),
    });
    for (const id of ['p-old', 'p-new'])
      await first.receive({ ...body(false), headers: { ...body(false).headers, 'idempotency-key': id } });
    for (const id of ['d-old', 'd-mid', 'd-new'])
      await first.receive({ ...body(true), headers: { ...body(true).headers, 'idempotency-key': id } });
    let db = await first.kysely();
    const events = sql.table(`${t.schema}.events`);
    await sql`update ${events} set processed_at = now() - interval '10 days' where id = 'p-old'`.execute(db);
    await sql`update ${events} set received_at = now() - interval '40 days' where id = 'd-old'`.execute(db);
    await sql`update ${events} set received_at = now() - interval '10 days' where id = 'd-mid'`.execute(db);
    const rows = async () =>
      (
        await sql<{ id: string; status: string; kept: boolean }>`
          select id, status, payload is not null as kept from ${events} order by id`.execute(db)
      ).rows.map((r) => `${r.id}:${r.status}${r.kept ? '+payload' : ''}`);

    expect(await first.sweep()).toMatchObject({ pruned: 1, purged: 1 });
    expect(await rows()).toEqual(['d-mid:dead+payload', 'd-new:dead+payload', 'p-new:processed']);
    await first.close();

    // No retention for processed rows, payloads kept, dead letters after 5 days: only d-mid goes.
    const second = open({ retention: false, deadRetention: '5d', keepPayload: true });
    db = await second.kysely();
    await second.receive({
      ...body(false),
      headers: { ...body(false).headers, 'idempotency-key': 'p-kept' },
    });
    await sql`update ${events} set processed_at = now() - interval '400 days' where status = 'processed'`.execute(
      db,
    );
    expect(await second.sweep()).toMatchObject({ pruned: 0, purged: 1 });
    expect(await rows()).toEqual(['d-new:dead+payload', 'p-kept:processed+payload', 'p-new:processed']);
    await second.close();
  });
});
