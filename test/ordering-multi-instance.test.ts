/**
 * The reorder buffer is shared: any number of instances on one database keep one cursor per
 * key. Two Inbox instances on two pools, then two processes, receive one key's events taking
 * turns and all at once; the ledger shows every event applied once, in seq order.
 * Real Postgres only: PGlite is one embedded session, there is no second instance to have.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { killAll, type LedgerProcess, startLedgerProcess } from './support/ledger-processes.js';
import { type LedgerInbox, ledgerInbox, ordered, postOrdered, range } from './support/ordering.js';

/** Opening PGlite and migrating can take a minute when the 2-core box is busy. */
const SETUP = 180_000;

/** Starting a process (tsx, and PGlite for the example) takes seconds on a busy 2-core box. */
const SLOW = 180_000;

let n = 0;
const newKey = (label: string) => `${label}-${++n}`;

/** A fixed shuffle of 1..count (deterministic, so a failure reproduces). */
function scrambled(count: number): number[] {
  const seqs = range(1, count);
  let state = 7;
  for (let i = seqs.length - 1; i > 0; i--) {
    state = (state * 48271) % 2147483647;
    const j = state % (i + 1);
    [seqs[i], seqs[j]] = [seqs[j], seqs[i]];
  }
  return seqs;
}

invariantsHoldAfterEach();

describe.skipIf(!postgresTarget)('two instances on one database (postgres)', () => {
  let t: TargetDb;
  let a: LedgerInbox;
  let b: LedgerInbox;

  beforeAll(async () => {
    t = await postgresTarget!.open();
    a = await ledgerInbox(t);
    b = await ledgerInbox({ ...t, db: t.another() });
  }, SETUP);
  afterAll(async () => {
    await a?.inbox.close();
    await b?.inbox.close();
    await t?.close();
  });

  it('taking turns: each instance drains what the other held, in order, once', async () => {
    const key = newKey('turns');
    // 12..2 arrive first, alternately at A and B: all held, in one buffer.
    for (const seq of range(2, 12).reverse()) {
      const outcome = await (seq % 2 ? a : b).inbox.receive(ordered(key, seq));
      expect(outcome.body).toMatchObject({ status: 'held', expected: 1 });
    }
    expect((await b.inbox.keyState(key))!.heldSeqs).toEqual(range(2, 12));
    // The gap-filling delivery reaches A, which drains everything B held too.
    expect((await a.inbox.receive(ordered(key, 1))).status).toBe(200);
    await a.inbox.idle();
    expect(await a.seqs(key)).toEqual(range(1, 12));

    // Then odd seqs go to A and even seqs to B, each pair in reverse.
    for (let seq = 13; seq < 24; seq += 2) {
      await b.inbox.receive(ordered(key, seq + 1));
      await a.inbox.receive(ordered(key, seq));
    }
    await Promise.all([a.inbox.idle(), b.inbox.idle()]);
    expect(await b.seqs(key)).toEqual(range(1, 24));
    expect(await b.balance(key)).toBe((24 * 25) / 2);
  });

  it('all at once: 40 events sent twice each, concurrently to both instances, apply in order, once', async () => {
    const key = newKey('at-once');
    const seqs = scrambled(40);
    const deliveries = [...seqs, ...seqs.slice().reverse()].map((seq, i) =>
      (i % 2 ? a : b).inbox.receive(ordered(key, seq)),
    );
    const outcomes = await Promise.all(deliveries);
    expect(outcomes.filter((o) => o.status !== 200 && o.status !== 202)).toEqual([]);
    await Promise.all([a.inbox.idle(), b.inbox.idle()]);
    expect(await a.seqs(key)).toEqual(range(1, 40));
    expect(await a.inbox.keyState(key)).toMatchObject({ nextSeq: 41, heldSeqs: [] });
    // Each event was applied once: one 'processed' outcome at most per event, the rest
    // duplicates or held; the ledger has one entry per id.
    const processed = outcomes.filter((o) => o.body.status === 'processed').map((o) => o.body.id);
    expect(new Set(processed).size).toBe(processed.length);
  });
});

describe.skipIf(!postgresTarget)('two processes on one database schema (postgres)', { timeout: SLOW }, () => {
  let t: TargetDb;
  let reader: LedgerInbox;
  let processes: LedgerProcess[] = [];

  beforeAll(async () => {
    t = await postgresTarget!.open();
    // Creates the inbox and ledger tables once, before the processes start (no setup race).
    reader = await ledgerInbox(t);
    processes = await Promise.all(
      [1, 2].map(() =>
        startLedgerProcess({
          databaseUrl: postgresUrl!,
          schema: t.schema,
          ledgerSchema: t.appSchema,
          sweepIntervalMs: 0,
        }),
      ),
    );
  }, SLOW);
  afterEach(async () => {
    await Promise.all(processes.map((p) => p.idle()));
  });
  afterAll(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    await killAll();
    await reader?.inbox.close();
    await t?.close();
  }, SLOW);

  it('alternately and at once over HTTP: one key applied in order, once', async () => {
    const [p, q] = processes;
    const key = newKey('processes');
    // Alternately, in reverse: everything but seq 1 is held, half of it by each process.
    for (const seq of range(2, 10).reverse()) {
      const reply = await postOrdered(`${(seq % 2 ? p : q).url}/webhooks`, key, seq);
      expect(reply.status).toBe(202);
    }
    expect((await postOrdered(`${q.url}/webhooks`, key, 1)).status).toBe(200);
    await q.idle();
    expect(await reader.seqs(key)).toEqual(range(1, 10));

    // At once: 11..40, each sent to both processes, all in flight together.
    const seqs = scrambled(30).map((s) => s + 10);
    const replies = await Promise.all(
      seqs.flatMap((seq) => [p, q].map((proc) => postOrdered(`${proc.url}/webhooks`, key, seq))),
    );
    expect(replies.filter((r) => r.status !== 200 && r.status !== 202).map((r) => r.body)).toEqual([]);
    await Promise.all([p.idle(), q.idle()]);
    const account = await reader.ledger.account(await reader.db(), key);
    expect(account.entries.map((e) => e.seq)).toEqual(range(1, 40));
    expect(account.balance).toBe((40 * 41) / 2);
    // What each process serves is the same ledger.
    const viaP = (await (await fetch(`${p.url}/accounts/${key}`)).json()) as any;
    expect(viaP.entries.map((e: { seq: number }) => e.seq)).toEqual(range(1, 40));
  });
});
