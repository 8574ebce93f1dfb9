/**
 * Deferred mode's claim applies nothing, so it is sent alone: a READ COMMITTED transaction of
 * its own, committed inside PostgreSQL before its answer comes back (src/db/drivers/fold.ts). The
 * key's lock is therefore not held while that answer travels and COMMIT follows, which queued
 * every claim of a busy key behind one round trip (the ledger's ingest contract, 50 senders on
 * one key). Real PostgreSQL, real HTTP.
 */
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startLedger } from '../examples/ledger/start.js';
import type { InboxOptions } from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';
import { blockedOnLock, GatedPool } from './support/gated-pool.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered, postOrdered, range } from './support/ordering.js';
import { perTestSchemas } from './support/per-test-schemas.js';

invariantsHoldAfterEach();

const DEFERRED: Omit<InboxOptions, 'handle'> = { mode: 'deferred', workers: 2, pollIntervalMs: 50 };

/** Waits until the workers have applied `count` events of `key` (the ledger is the judge). */
async function applied(app: Pick<LedgerInbox, 'inbox' | 'seqs'>, key: string, count: number) {
  await vi.waitFor(
    async () => {
      await app.inbox.idle();
      expect((await app.seqs(key)).length).toBeGreaterThanOrEqual(count);
    },
    { timeout: 60_000, interval: 20 },
  );
  return app.seqs(key);
}

describe.runIf(postgresTarget)('deferred mode: the claim alone', () => {
  const schemas = perTestSchemas(postgresTarget!);
  let admin: pg.Pool;
  const pools: Array<{ end(): Promise<void> }> = [];
  beforeAll(() => {
    admin = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    admin.on('error', () => {});
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await admin?.end();
  });

  it("while one claim's answer of key K is on its way back, the next claim of K is decided and answered", async () => {
    const t = schemas();
    const pool = new GatedPool(postgresUrl!);
    pools.push(pool);
    // A claim waiting for the key past 3 s would be answered 409 in-flight. This instance only
    // acknowledges (workers: 0): a worker applying seq 1 before seq 2's claim would make that
    // claim pending, not held, and the answer would depend on the machine's speed.
    const app = await ledgerInbox({ ...t, db: pool }, { ...DEFERRED, workers: 0, lockTimeoutMs: 3000 });
    try {
      const answer = pool.holdAnswer(/execute "wi:[^"]+\.claim_many"\(/);
      const first = app.inbox.receive(ordered('k', 1));
      await answer.reached; // the claim has run in Postgres; the inbox has not heard back
      // In a transaction of its own, the first claim would still hold the key here (its COMMIT
      // comes only after its answer), and this claim would wait for it.
      const second = await app.inbox.receive(ordered('k', 2)).finally(() => answer.open());
      expect(second).toMatchObject({ status: 202, kind: 'held' });
      expect(await first).toMatchObject({ status: 202, kind: 'pending' });
    } finally {
      await app.inbox.close();
    }
    // Another instance applies both, in order. Their NOTIFY went out before it listened: its
    // sweeper finds the key.
    const worker = await ledgerInbox({ ...t, db: t.another() }, DEFERRED);
    try {
      await worker.inbox.sweep();
      expect(await applied(worker, 'k', 2)).toEqual([1, 2]);
    } finally {
      await worker.inbox.close();
    }
  });

  it('200 concurrent deliveries over HTTP on one ordered key: all 202, each applied once, in seq order', async () => {
    const t = schemas();
    const app = await startLedger({
      ledgerSchema: t.appSchema,
      ingest: false,
      // Generous waits: a busy test machine must not turn a slow claim into a 409 or 503.
      inbox: { db: t.db, schema: t.schema, ...DEFERRED, lockTimeoutMs: 60_000, poolWaitTimeoutMs: 60_000 },
    });
    watchInvariants(app.inbox);
    try {
      const seqs = range(1, 200).sort(() => Math.random() - 0.5);
      const answers = await Promise.all(seqs.map((seq) => postOrdered(`${app.url}/webhooks`, 'k', seq)));
      const statuses = new Set(answers.map((a) => `${a.status} ${a.body?.status}`));
      expect([...statuses].filter((s) => s !== '202 pending' && s !== '202 held')).toEqual([]);
      const ledger = {
        inbox: app.inbox,
        seqs: async (key: string) =>
          (await app.ledger.account(await app.inbox.kysely(), key)).entries.map((e) => e.seq!),
      };
      expect(await applied(ledger, 'k', 200)).toEqual(range(1, 200));
      const account = await app.ledger.account(await app.inbox.kysely(), 'k');
      expect(new Set(account.entries.map((e) => e.id)).size).toBe(200);
      expect(account.balance).toBe((200 * 201) / 2);
    } finally {
      await app.close();
    }
  });

  it('a claim alone that times out waiting for its key is 409 in-flight and leaves its connection clean; a big body too', async () => {
    const t = schemas();
    const pool = new pg.Pool({ connectionString: postgresUrl!, max: 1 });
    pool.on('error', () => {});
    pools.push(pool);
    // Acknowledges only: the one connection is the deliveries'.
    const app = await ledgerInbox({ ...t, db: pool }, { ...DEFERRED, workers: 0, lockTimeoutMs: 200 });
    // A big body's claim folds as any other: its values written in, megabytes of them.
    const big = (seq: number, id = `k:${seq}`) => {
      const d = ordered('k', seq, seq, id);
      return { ...d, rawBody: Buffer.from(JSON.stringify({ amount: seq, pad: 'x'.repeat(70_000) })) };
    };
    expect((await app.inbox.receive(ordered('k', 1))).kind).toBe('pending');
    const other = await admin.connect();
    try {
      await other.query('begin');
      await other.query(`select 1 from "${t.schema}".keys where key = 'k' for update`);
      expect(await app.inbox.receive(ordered('k', 2))).toMatchObject({ status: 409, kind: 'in-flight' });
      expect(await app.inbox.receive(big(3))).toMatchObject({ status: 409, kind: 'in-flight' });
      await other.query('commit');
    } finally {
      other.release();
    }
    // The same connection, outside any transaction: each claim commits on its own again.
    expect((await app.inbox.receive(ordered('k', 2))).kind).toBe('held');
    expect((await app.inbox.receive(big(3))).kind).toBe('held');
    expect((await app.inbox.receive(big(3))).kind).toBe('held'); // a duplicate of a waiting event
    const { rows } = await pool.query(
      `select id, status from "${t.schema}".events where key = 'k' order by seq`,
    );
    expect(rows).toEqual([
      { id: 'k:1', status: 'pending' },
      { id: 'k:2', status: 'held' },
      { id: 'k:3', status: 'held' },
    ]);
    await app.inbox.close();
  });

  // Under REPEATABLE READ the claim's snapshot would be taken before it waited for the key:
  // it would not see the event another transaction holds at the same seq, insert a second one,
  // and fail on the unique index (answered 409, retried in vain) instead of refusing the new id
  // (422).
  it.each([
    ['our pg driver: the claim alone sets it', 'pg'],
    ["a Kysely instance of the user's: the claim keeps its transaction", 'kysely'],
  ] as const)(
    'under a REPEATABLE READ server default, the claim still decides at READ COMMITTED (%s)',
    async (_, driver) => {
      const t = schemas();
      const pool = new pg.Pool({
        connectionString: postgresUrl!,
        max: 10,
        options: '-c default_transaction_isolation=repeatable\\ read',
      });
      pool.on('error', () => {});
      const kysely =
        driver === 'kysely' ? new Kysely<any>({ dialect: new PostgresDialect({ pool }) }) : undefined;
      pools.push(kysely ? { end: () => kysely.destroy() } : pool);
      const db: TargetDb = { ...t, db: kysely ?? pool };
      const app = await ledgerInbox(db, { ...DEFERRED, lockTimeoutMs: 30_000 });
      const source = app.inbox.options.source;
      expect((await app.inbox.receive(ordered('k', 2))).kind).toBe('held'); // the key row exists

      const other = await admin.connect();
      try {
        await other.query('begin');
        await other.query(`select 1 from "${t.schema}".keys where source = $1 and key = 'k' for update`, [
          source,
        ]);
        const claim = app.inbox.receive(ordered('k', 3, 3, 'k:3b'));
        const claimText = driver === 'pg' ? `"wi:${t.schema}.claim_many"(` : `"${t.schema}"."claim_many"(`;
        expect(await blockedOnLock(admin, claimText, claim)).toBe(true);
        // Another id takes seq 3 while the claim waits for the key.
        await other.query(
          `insert into "${t.schema}".events (source, id, key, seq, body_hash, status, payload, headers, stream)
           values ($1, 'k:3', 'k', 3, 'x', 'held', convert_to('{"amount": 3}', 'utf8'), $2::jsonb, 'k')`,
          [source, JSON.stringify({ 'content-type': 'application/json' })],
        );
        await other.query('commit');
        expect(await claim).toMatchObject({ status: 422, kind: 'mismatch' });
      } finally {
        other.release();
      }
      expect((await app.inbox.receive(ordered('k', 1))).kind).toBe('pending');
      expect(await applied(app, 'k', 3)).toEqual([1, 2, 3]);
      const { rows } = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.table(`${t.schema}.events`)} where id = 'k:3b'`.execute(
        await app.db(),
      );
      expect(rows[0].n).toBe(0);
      await app.inbox.close();
    },
  );
});
