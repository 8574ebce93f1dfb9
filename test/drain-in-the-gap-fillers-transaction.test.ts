/**
 * Inline mode: the held events a delivery's claim makes runnable are applied in that
 * delivery's transaction, after its handler and before COMMIT, up to DRAIN_IN_TRANSACTION; the
 * rest are drained after its response. What a user sees: the ledger complete and in order when
 * the gap-filler's answer arrives, the gap-filler's own outcome whatever a held event's handler
 * does, and nothing applied at all when the database fails the transaction.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRAIN_IN_TRANSACTION } from '../src/background/drain.js';
import type { Inbox, InboxEvent } from '../src/index.js';
import { postgresTarget, type TargetDb } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered, range } from './support/ordering.js';

const SETUP = 180_000;

let n = 0;
/** A key no other test uses (every test shares the target's schemas). */
const newKey = (label: string) => `${label}-${++n}`;

/** Each event of the key with its status and `processed_at`, in seq order. */
async function rows(inbox: Inbox, key: string) {
  const db = await inbox.kysely();
  const found = await db
    .withSchema(inbox.tables.schema)
    .selectFrom('events')
    .select(['seq', 'status', 'attempts', 'processed_at'])
    .where('key', '=', key)
    .orderBy('seq')
    .execute();
  return found.map((r) => ({
    seq: Number(r.seq),
    status: r.status as string,
    attempts: r.attempts as number,
    processedAt: r.processed_at === null ? null : new Date(r.processed_at).getTime(),
  }));
}

invariantsHoldAfterEach();

describe.runIf(postgresTarget)("held events drained in the gap-filler's transaction", () => {
  let t: TargetDb;
  let app: LedgerInbox;
  const closers: Inbox[] = [];
  /** Events whose handler throws (by id); events whose handler waits for a gate (by id). */
  const failing = new Set<string>();
  const gates = new Map<string, Promise<void>>();
  const wrap: Parameters<typeof ledgerInbox>[2] = (handle) => async (event: InboxEvent<any>, ctx) => {
    await gates.get(event.id);
    if (failing.has(event.id)) throw new Error(`injected failure of ${event.id}`);
    return handle(event, ctx);
  };

  beforeAll(async () => {
    t = await postgresTarget!.open();
    app = await ledgerInbox(t, { retryBaseMs: 60_000, retryCapMs: 60_000 }, wrap);
  }, SETUP);
  afterAll(async () => {
    for (const inbox of closers) await inbox.close();
    await app?.inbox.close();
    await t?.close();
  });

  async function variant(options: Parameters<typeof ledgerInbox>[1]): Promise<LedgerInbox> {
    const v = await ledgerInbox(t, { source: `variant-${++n}`, ...options }, wrap);
    closers.push(v.inbox);
    return v;
  }

  it('applies them in its transaction: in the ledger, in seq order, when its response arrives', async () => {
    const key = newKey('same-tx');
    expect((await app.send(ordered(key, 3), ordered(key, 2), ordered(key, 4))).map((o) => o.status)).toEqual([
      202, 202, 202,
    ]);
    const [fill] = await app.send(ordered(key, 1));
    expect(fill.body).toEqual({ status: 'processed', id: `${key}:1`, result: { balance: 1 } });
    // No idle(): committed with the gap-filler, before its answer.
    expect(await app.seqs(key)).toEqual([1, 2, 3, 4]);
    expect(await app.balance(key)).toBe(10);
    const found = await rows(app.inbox, key);
    expect(found.map((r) => r.status)).toEqual(['processed', 'processed', 'processed', 'processed']);
    // processed_at is now(), the transaction's start: one transaction for all four.
    expect(new Set(found.map((r) => r.processedAt)).size).toBe(1);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 5, state: 'open', heldSeqs: [] });
  });

  it(`applies at most ${DRAIN_IN_TRANSACTION} in it; the rest drain after its response, in order`, async () => {
    const key = newKey('bound');
    const last = DRAIN_IN_TRANSACTION + 3;
    for (const seq of range(2, last)) expect((await app.send(ordered(key, seq)))[0].status).toBe(202);
    // The first event past the bound waits in its handler until the gap-filler is answered:
    // had it run in the gap-filler's transaction, that answer would never come.
    let open: () => void = () => {};
    gates.set(`${key}:${DRAIN_IN_TRANSACTION + 2}`, new Promise<void>((resolve) => (open = resolve)));
    const [fill] = await app.send(ordered(key, 1));
    expect(fill.status).toBe(200);
    expect(await app.seqs(key)).toEqual(range(1, DRAIN_IN_TRANSACTION + 1));
    open();
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual(range(1, last));
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: last + 1, heldSeqs: [] });
  });

  it('a held event whose handler throws: the gap-filler is processed, the event failed once, the key waits at it', async () => {
    const key = newKey('fails');
    failing.add(`${key}:3`);
    await app.send(ordered(key, 2), ordered(key, 3), ordered(key, 4));
    const [fill] = await app.send(ordered(key, 1));
    expect(fill.body).toEqual({ status: 'processed', id: `${key}:1`, result: { balance: 1 } });
    // Seq 2's write committed with seq 1's; seq 3's failure, recorded in the same
    // transaction, undid only its own savepoint.
    expect(await app.seqs(key)).toEqual([1, 2]);
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([1, 2]);
    expect(
      (await rows(app.inbox, key)).map(({ seq, status, attempts }) => ({ seq, status, attempts })),
    ).toEqual([
      { seq: 1, status: 'processed', attempts: 0 },
      { seq: 2, status: 'processed', attempts: 0 },
      { seq: 3, status: 'held', attempts: 1 },
      { seq: 4, status: 'held', attempts: 0 },
    ]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, state: 'open', heldSeqs: [3, 4] });
    failing.delete(`${key}:3`);
  });

  it("onPoison 'skip' with maxAttempts 1: the failing held event is dead-lettered and those behind it drain", async () => {
    const v = await variant({ onPoison: 'skip', maxAttempts: 1 });
    const key = newKey('skip');
    failing.add(`${key}:3`);
    await v.send(ordered(key, 2), ordered(key, 3), ordered(key, 4), ordered(key, 5));
    const [fill] = await v.send(ordered(key, 1));
    expect(fill.body).toEqual({ status: 'processed', id: `${key}:1`, result: { balance: 1 } });
    await v.inbox.idle();
    expect(await v.seqs(key)).toEqual([1, 2, 4, 5]);
    expect(await v.inbox.event(`${key}:3`)).toMatchObject({
      status: 'dead',
      attempts: 1,
      deadReason: 'poison',
    });
    expect(await v.inbox.keyState(key)).toMatchObject({ nextSeq: 6, state: 'open', heldSeqs: [] });
    failing.delete(`${key}:3`);
  });

  it('a database error in the drain rolls the whole transaction back: 503, nothing applied, applied on retry', async () => {
    const key = newKey('db-error');
    const db = await app.db();
    const keys = sql.table(`${app.inbox.tables.schema}.keys`);
    const fn = sql.raw(`"${app.inbox.tables.schema}".fail_take_of_seq_2`);
    // The cursor moving from 2 to 3 is take_next taking seq 2 (the claim moves it to 2): the
    // database fails that statement, not a handler.
    await sql`create function ${fn}() returns trigger language plpgsql as $$
      begin raise exception 'injected database failure'; end $$`.execute(db);
    await sql`create trigger fail_take_of_seq_2 before update on ${keys} for each row
      when (new.key = ${sql.lit(key)} and new.next_seq = 3) execute function ${fn}()`.execute(db);
    await app.send(ordered(key, 2), ordered(key, 3));
    const [fill] = await app.send(ordered(key, 1));
    expect(fill.status).toBe(503);
    expect(await app.seqs(key)).toEqual([]);
    expect((await rows(app.inbox, key)).map(({ seq, status }) => ({ seq, status }))).toEqual([
      { seq: 2, status: 'held' },
      { seq: 3, status: 'held' },
    ]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 1, heldSeqs: [2, 3] });
    await sql`drop trigger fail_take_of_seq_2 on ${keys}`.execute(db);
    // The sender retries: everything is applied, once, in order.
    expect((await app.send(ordered(key, 1)))[0].status).toBe(200);
    expect(await app.seqs(key)).toEqual([1, 2, 3]);
  });
});
