/**
 * No held event is lost to a crash: a process SIGKILLed while it holds events, while the
 * gap-filling delivery's transaction applies them, or in the middle of the drain after its
 * response (a handler stopped inside an event's transaction), leaves a buffer that a retry, a
 * restarted process, or another instance's sweeper, applies in order, once.
 * Real Postgres only: the crash is of a process, and the buffer is shared across processes.
 */
import { type Kysely, sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DRAIN_IN_TRANSACTION } from '../src/background/drain.js';
import { postgresTarget, postgresUrl, type TargetDb, uniqueName } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { killAll, startLedgerProcess } from './support/ledger-processes.js';
import { type LedgerInbox, ledgerInbox, ordered, postOrdered, range } from './support/ordering.js';

/** Opening PGlite and migrating can take a minute when the 2-core box is busy. */
const SETUP = 180_000;

/** Starting a process (tsx, and PGlite for the example) takes seconds on a busy 2-core box. */
const SLOW = 180_000;

let n = 0;
const newKey = (label: string) => `${label}-${++n}`;

/** A connection string whose sessions can be told apart in pg_stat_activity. */
function urlFor(applicationName: string): string {
  return `${postgresUrl}${postgresUrl!.includes('?') ? '&' : '?'}application_name=${applicationName}`;
}

/**
 * Resolves once Postgres has noticed the killed process's connections are gone, so that the
 * transaction it left open has rolled back and released the key's lock.
 */
async function sessionsGone(db: Kysely<any>, applicationName: string): Promise<void> {
  for (;;) {
    const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from pg_stat_activity where application_name = ${applicationName}`.execute(
      db,
    );
    if (rows[0].n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

invariantsHoldAfterEach();

describe.skipIf(!postgresTarget)(
  'a crashed process loses no held event (postgres)',
  { timeout: SLOW },
  () => {
    let t: TargetDb;
    let other: LedgerInbox;

    beforeAll(async () => {
      t = await postgresTarget!.open();
      // Another instance, in this process; it also created the tables the processes use.
      other = await ledgerInbox(t);
    }, SETUP);
    afterEach(async () => {
      await killAll();
    });
    afterAll(async () => {
      await other?.inbox.close();
      await t?.close();
    });

    const start = (options: {
      name?: string;
      gate?: { key: string; seq: number };
      sweepIntervalMs?: number;
    }) =>
      startLedgerProcess({
        databaseUrl: urlFor(options.name ?? uniqueName('wi_app')),
        schema: t.schema,
        ledgerSchema: t.appSchema,
        sweepIntervalMs: options.sweepIntervalMs ?? 0,
        gate: options.gate,
      });

    it('killed while events are held: after a restart the gap-filling delivery drains them, in order, once', async () => {
      const key = newKey('held');
      const first = await start({});
      for (const seq of [4, 2, 5, 3]) {
        expect((await postOrdered(`${first.url}/webhooks`, key, seq)).status).toBe(202);
      }
      await first.kill();
      expect(await other.inbox.keyState(key)).toMatchObject({ nextSeq: 1, heldSeqs: [2, 3, 4, 5] });

      const restarted = await start({});
      const reply = await postOrdered(`${restarted.url}/webhooks`, key, 1);
      expect(reply.body).toEqual({ status: 'processed', id: `${key}:1`, result: { balance: 1 } });
      await restarted.idle();
      expect(await other.seqs(key)).toEqual(range(1, 5));
      expect(await other.balance(key)).toBe(15);
      await restarted.stop();
    });

    it("killed while the gap-filler's transaction applies held events: nothing applied, the retry applies all, in order, once", async () => {
      const key = newKey('in-tx');
      const name = uniqueName('wi_app');
      const doomed = await start({ name, gate: { key, seq: 4 } });
      for (const seq of [2, 3, 4, 5, 6]) await postOrdered(`${doomed.url}/webhooks`, key, seq);
      // Seq 1 applies 2, 3 and 4 in its own transaction (DRAIN_IN_TRANSACTION): seq 4's
      // handler wrote its ledger entry and stops there, before COMMIT and so before the answer.
      const reply = postOrdered(`${doomed.url}/webhooks`, key, 1).then(
        () => 'answered',
        () => 'no answer',
      );
      expect(await doomed.gate).toBe(`${key}:4`);
      await doomed.kill();
      expect(await reply).toBe('no answer'); // the sender retries
      await sessionsGone(await other.db(), name);

      // The transaction rolled back whole: seq 1's write and the three drained ones.
      expect(await other.seqs(key)).toEqual([]);
      expect(await other.inbox.keyState(key)).toMatchObject({ nextSeq: 1, heldSeqs: [2, 3, 4, 5, 6] });
      const retried = await other.send(ordered(key, 1));
      expect(retried[0].status).toBe(200);
      await other.inbox.idle();
      const account = await other.ledger.account(await other.db(), key);
      expect(account.entries.map((e) => e.seq)).toEqual(range(1, 6));
      expect(account.balance).toBe(21);
      expect(await other.inbox.keyState(key)).toMatchObject({ nextSeq: 7, heldSeqs: [] });
    });

    // Past DRAIN_IN_TRANSACTION, the gap-filler answers and drains the rest after its response,
    // each event in its own transaction: a crash there leaves the rest held, past the cursor.
    const pastTheBound = DRAIN_IN_TRANSACTION + 2;

    it("killed in the middle of a drain after the response: another instance's sweeper finishes it, in order, once", async () => {
      const key = newKey('mid-drain');
      const name = uniqueName('wi_app');
      const last = pastTheBound + 2;
      const doomed = await start({ name, gate: { key, seq: pastTheBound + 1 } });
      for (const seq of range(2, last)) await postOrdered(`${doomed.url}/webhooks`, key, seq);
      expect((await postOrdered(`${doomed.url}/webhooks`, key, 1)).status).toBe(200);
      // Seq 1's transaction applied 2 to 9, the drain after its response applied 10 and is
      // inside 11's transaction (its ledger entry written, not committed) when the process dies.
      expect(await doomed.gate).toBe(`${key}:${pastTheBound + 1}`);
      expect(await other.seqs(key)).toEqual(range(1, pastTheBound));
      await doomed.kill();
      await sessionsGone(await other.db(), name);

      expect(await other.inbox.keyState(key)).toMatchObject({
        nextSeq: pastTheBound + 1,
        heldSeqs: range(pastTheBound + 1, last),
      });
      const report = await other.inbox.sweep();
      expect(report.drained).toBe(2);
      const account = await other.ledger.account(await other.db(), key);
      expect(account.entries.map((e) => e.seq)).toEqual(range(1, last));
      expect(account.balance).toBe((last * (last + 1)) / 2);
      expect(await other.inbox.keyState(key)).toMatchObject({ nextSeq: last + 1, heldSeqs: [] });
    });

    it('killed in the middle of a drain after the response: the restarted process finishes it by its own sweeper', async () => {
      const key = newKey('restart-sweeps');
      const last = pastTheBound + 1;
      const doomed = await start({ gate: { key, seq: pastTheBound } });
      for (const seq of range(2, last).reverse()) await postOrdered(`${doomed.url}/webhooks`, key, seq);
      await postOrdered(`${doomed.url}/webhooks`, key, 1);
      expect(await doomed.gate).toBe(`${key}:${pastTheBound}`);
      await doomed.kill();

      // Nothing is sent to the new process: its sweeper (every 20 ms) finds the interrupted drain
      // once Postgres has rolled the dead transaction back.
      const restarted = await start({ sweepIntervalMs: 20 });
      let seqs = await other.seqs(key);
      while (seqs.length < last) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        seqs = await other.seqs(key);
      }
      await restarted.idle();
      expect(await other.seqs(key)).toEqual(range(1, last));
      expect(await other.inbox.keyState(key)).toMatchObject({ nextSeq: last + 1, heldSeqs: [] });
      await restarted.stop();
    });
  },
);
