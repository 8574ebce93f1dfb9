/**
 * No event stranded below its cursor. Each case forces one interleaving of the ordering state
 * machine deterministically (a gate in the handler, a pool that holds one statement, a second
 * session) and checks what a user sees — outcomes, the ledger, the event's status — and the
 * invariants of the inbox's tables (src/testing/invariants.ts): before the fixes each left an
 * event `held` or `pending` below its key's cursor, two events at one seq, a deadlock, or a
 * sweeper that failed on every pass.
 */
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InboxEvent } from '../src/index.js';
import { checkInvariants } from '../src/testing/index.js';
import { postgresTarget, postgresUrl, type TargetDb, targets } from './support/databases.js';
import { blockedOnLock, Gate, GatedPool } from './support/gated-pool.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered } from './support/ordering.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const SETUP = 180_000;
/** Every connection of a pool made with this starts its transactions REPEATABLE READ. */
const REPEATABLE_READ = '-c default_transaction_isolation=repeatable\\ read';

invariantsHoldAfterEach();

async function invariants(app: LedgerInbox) {
  return checkInvariants(await app.db(), app.inbox.tables);
}

/** A handler wrapper that throws for the events `failing` names (while it does). */
function failWhen(failing: (event: InboxEvent) => boolean | Promise<boolean>) {
  return (handle: LedgerInbox['ledger']['handle']) => async (event: InboxEvent<any>, ctx: any) => {
    if (await failing(event)) throw new Error(`injected failure of ${event.id}`);
    return handle(event, ctx);
  };
}

describe.runIf(postgresTarget)('ordering races on real Postgres', () => {
  const schemas = perTestSchemas(postgresTarget!);
  let admin: pg.Pool;
  const pools: GatedPool[] = [];
  beforeAll(() => {
    admin = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    admin.on('error', () => {});
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await admin?.end();
  });
  const gatedPool = (options?: string) => {
    const pool = new GatedPool(postgresUrl!, options);
    pools.push(pool);
    return pool;
  };
  // A claim as pg_stat_activity shows it: folded by our driver, `execute "wi:<schema>.claim"(…)`
  // (src/db/drivers/fold.ts); sent alone, its own text (`… "<schema>"."claim"($1, …)`).
  const claimOf = (t: TargetDb) => [`"wi:${t.schema}.claim"(`, `"${t.schema}"."claim"(`];
  // A replay's read of its key's row, FOR UPDATE (src/operations/replay.ts).
  const replayKeyRead = (t: TargetDb) => `blocked_seq from "${t.schema}"."keys"`;

  it("1. first-seen: the key's first event fails while the next is in flight: the first stays at the cursor, the next waits behind it", async () => {
    const t = schemas();
    const inHandler = new Gate();
    const app = await ledgerInbox(
      t,
      { firstSeq: 'first-seen', lockTimeoutMs: 30_000 },
      failWhen(async (e) => {
        if (e.seq !== 5 || e.attempt > 1) return false;
        await inHandler.passed();
        return true;
      }),
    );
    // Seq 5 creates the key (uncommitted) and its handler waits; seq 6 waits on that key row.
    const five = app.inbox.receive(ordered('k', 5));
    await inHandler.reached;
    const six = app.inbox.receive(ordered('k', 6));
    await blockedOnLock(admin, claimOf(t));
    // Seq 5 throws. Before, the rollback took the key row with it: seq 6 started the key at 6
    // and was applied, and seq 5 was then stored pending below the cursor, for ever.
    inHandler.open();
    const [o5, o6] = await Promise.all([five, six]);
    expect(o5.status).toBe(500);
    expect(o6.status).toBe(202);
    expect(await app.inbox.event('k:5')).toMatchObject({ status: 'pending', attempts: 1 });
    expect(await invariants(app)).toEqual([]);

    expect((await app.inbox.receive(ordered('k', 5))).status).toBe(200); // the sender's retry
    await app.inbox.idle();
    expect(await app.seqs('k')).toEqual([5, 6]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('3. deferred: a redelivery while a worker applies the same event is answered at once, and the event is applied once', async () => {
    const t = schemas();
    const inHandler = new Gate();
    let runs = 0;
    const app = await ledgerInbox(
      t,
      { mode: 'deferred', workers: 1, lockTimeoutMs: 30_000 },
      (handle) => async (event, ctx) => {
        runs++;
        if (runs === 1) await inHandler.passed();
        return handle(event, ctx);
      },
    );
    expect((await app.inbox.receive(ordered('k', 1))).status).toBe(202);
    await inHandler.reached; // a worker took it (take_turn) and runs the handler
    const again = app.inbox.receive(ordered('k', 1));
    // Before: the redelivery's claim held the key and waited for the worker's event row, and
    // the worker's advance then waited for the key: a deadlock, and the handler ran twice.
    const waited = await blockedOnLock(admin, claimOf(t), again);
    inHandler.open();
    expect(waited).toBe(false);
    expect((await again).status).toBe(202);
    await app.inbox.idle();
    expect(runs).toBe(1);
    expect(await app.seqs('k')).toEqual([1]);
    expect(await app.inbox.event('k:1')).toMatchObject({ status: 'processed' });
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('4. a gap timeout while a failing run holds the key does not skip its seq', async () => {
    const t = schemas();
    const inHandler = new Gate();
    const app = await ledgerInbox(
      t,
      { gapTimeoutMs: 1, onGapTimeout: 'skip' },
      failWhen(async (e) => {
        if (e.seq !== 2 || e.attempt > 1) return false;
        await inHandler.passed();
        return true;
      }),
    );
    expect((await app.send(ordered('k', 1), ordered('k', 3))).map((o) => o.status)).toEqual([200, 202]);
    const two = app.inbox.receive(ordered('k', 2));
    await inHandler.reached;
    // Seq 3 waited past the gap timeout, but seq 2's run holds the key: the pass leaves it.
    // Before, the failure was recorded after the rollback, and a pass in between skipped seq
    // 2 and applied 3, then stored 2 as pending below the cursor.
    expect(await app.inbox.sweep()).toMatchObject({ gapsSkipped: 0, drained: 0 });
    inHandler.open();
    expect((await two).status).toBe(500);
    expect(await app.inbox.event('k:2')).toMatchObject({ status: 'pending', attempts: 1 });
    expect(await invariants(app)).toEqual([]);
    expect(await app.inbox.sweep()).toMatchObject({ gapsSkipped: 0 });

    expect((await app.inbox.receive(ordered('k', 2))).status).toBe(200);
    await app.inbox.idle();
    expect(await app.seqs('k')).toEqual([1, 2, 3]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('5a. under a REPEATABLE READ server default, two new ids at one seq: one waits, the other is refused', async () => {
    const t = schemas();
    const pool = gatedPool(REPEATABLE_READ);
    const app = await ledgerInbox({ ...t, db: pool }, { lockTimeoutMs: 30_000 });
    const db = await app.db();
    const { rows } = await sql<{
      d: string;
    }>`select current_setting('default_transaction_isolation') as d`.execute(db);
    expect(rows[0].d).toBe('repeatable read');

    const aCommits = pool.hold(/^commit/i);
    const a = app.inbox.receive(ordered('k', 3, 3, 'a'));
    await aCommits.reached; // a's claim decided "held"; its transaction holds the key
    const b = app.inbox.receive(ordered('k', 3, 3, 'b'));
    await blockedOnLock(admin, claimOf(t)); // b's statement (and, under RR, its snapshot) began
    aCommits.open();
    const [oa, ob] = await Promise.all([a, b]);
    expect(oa.status).toBe(202);
    expect(ob).toMatchObject({ status: 422, kind: 'mismatch' });

    await app.send(ordered('k', 1), ordered('k', 2));
    await app.inbox.idle();
    expect(await app.seqs('k')).toEqual([1, 2, 3]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('5b. under a REPEATABLE READ server default, a sweep never skips a gap a held event filled during the pass', async () => {
    const t = schemas();
    const pool = gatedPool(REPEATABLE_READ);
    const app = await ledgerInbox(
      { ...t, db: pool },
      { gapTimeoutMs: 1, onGapTimeout: 'skip', lockTimeoutMs: 30_000 },
    );
    // k0's event is the older: the pass handles k0 first, then k1.
    expect((await app.send(ordered('k0', 3), ordered('k1', 3))).map((o) => o.status)).toEqual([202, 202]);
    // A session of our own records k0's gap and does not commit: the pass waits there, on k0.
    const blocker = await admin.connect();
    try {
      await blocker.query('begin');
      await blocker.query(
        `insert into "${t.schema}".gaps (source, key, from_seq, to_seq, reason, stream) values ($1, 'k0', 1, 1, 'skip', 'k0')`,
        [app.inbox.options.source],
      );
      const sweep = app.inbox.sweep();
      await blockedOnLock(admin, `"${t.schema}"."sweep"(`);
      // Meanwhile seq 2 of k1 arrives and is held: k1's gap is only seq 1 now.
      expect((await app.inbox.receive(ordered('k1', 2))).status).toBe(202);
      await blocker.query('rollback');
      await sweep;
    } finally {
      blocker.release();
    }
    await app.inbox.idle();
    expect(await app.seqs('k1')).toEqual([2, 3]);
    expect(await app.seqs('k0')).toEqual([3]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('8. first-seen with onPoison skip: no gap is recorded ahead of the cursor, and later sweeps do not fail', async () => {
    const t = schemas();
    const inHandler = new Gate();
    const app = await ledgerInbox(
      t,
      { firstSeq: 'first-seen', onPoison: 'skip', maxAttempts: 1, gapTimeoutMs: 1, lockTimeoutMs: 30_000 },
      failWhen(async (e) => {
        if (e.seq !== 5) return false;
        await inHandler.passed();
        return true;
      }),
    );
    const five = app.inbox.receive(ordered('k', 5));
    await inHandler.reached;
    const three = app.inbox.receive(ordered('k', 3));
    await blockedOnLock(admin, claimOf(t));
    // Seq 5 started the key and is poison: skipped, the cursor at 6. Seq 3, below the key's
    // first seq, is from before the consumer joined (firstSeq 'first-seen'): 200, not applied.
    // Before, seq 3 started the key at 3 and the poison gap of 5 was recorded ahead of it:
    // every later gap timeout of the key collided with it and failed the whole pass.
    inHandler.open();
    const [o5, o3] = await Promise.all([five, three]);
    expect(o5.kind).toBe('dead-lettered');
    expect(o3.status).toBe(200);
    expect(await app.inbox.event('k:5')).toMatchObject({ status: 'dead', deadReason: 'poison' });
    expect(await invariants(app)).toEqual([]);

    expect((await app.inbox.receive(ordered('k', 7))).status).toBe(202);
    expect(await app.inbox.sweep()).toMatchObject({ gapsSkipped: 1, drained: 1, keyErrors: 0 });
    expect(await app.seqs('k')).toEqual([7]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('9. an operator skip racing a replay of the same dead letter refuses instead of stranding it', async () => {
    const t = schemas();
    const pool = gatedPool();
    let poison = true;
    const app = await ledgerInbox(
      { ...t, db: pool },
      { onPoison: 'block', maxAttempts: 1 },
      failWhen((e) => e.seq === 2 && poison),
    );
    expect((await app.send(ordered('k', 1), ordered('k', 2))).map((o) => o.kind)).toEqual([
      'processed',
      'dead-lettered',
    ]);
    poison = false;
    const ops = await app.inbox.operations();
    // The skip has read the event's status (dead) and waits before its transaction locks the key.
    const skipLocks = pool.hold(/select next_seq, state, blocked_seq, blocked_reason/);
    const skipping = ops.skip({ id: 'k:2' });
    await skipLocks.reached;
    const [replayed] = await ops.replay('k:2'); // held again at seq 2, the key open
    expect(replayed.outcome).toBe('requeued');
    skipLocks.open();
    await expect(skipping).rejects.toThrow(/not dead/);

    await app.inbox.sweep();
    expect(await app.seqs('k')).toEqual([1, 2]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it("10. an operator replay while a delivery holds the key's row waits for it, unblocks the key, and the event is applied", async () => {
    const t = schemas();
    const pool = gatedPool();
    let poison = true;
    const app = await ledgerInbox(
      { ...t, db: pool },
      { onPoison: 'block', maxAttempts: 1, lockTimeoutMs: 30_000 },
      failWhen((e) => e.seq === 1 && poison),
    );
    expect((await app.inbox.receive(ordered('k', 1))).kind).toBe('dead-lettered');
    expect(await app.inbox.keyState('k')).toMatchObject({ state: 'blocked', blockedSeq: 1 });
    poison = false;
    // Seq 2's claim locks the key row (seq 2 is held behind the block) and waits before COMMIT.
    const commit = pool.hold(/commit$/);
    const two = app.inbox.receive(ordered('k', 2));
    await commit.reached;
    const replaying = app.inbox.replay('k:1');
    // Before: the replay read the key row with SKIP LOCKED, found none, took the key for one
    // without a cursor yet, and re-queued seq 1 without unblocking the key. Seq 1 then waited
    // behind a block that nothing lifts (no dead letter left to replay), and nothing applied.
    // The replay reads the key while the claim holds it: it must wait for the key's row (the
    // interleaving this case is about), then the claim commits.
    const waited = await blockedOnLock(admin, replayKeyRead(t), replaying).finally(() => commit.open());
    expect(waited).toBe(true);
    expect((await two).status).toBe(202);
    const [replayed] = await replaying;
    expect(replayed).toMatchObject({ outcome: 'requeued', status: 'processed' });
    await app.inbox.sweep();
    expect(await app.seqs('k')).toEqual([1, 2]);
    expect(await app.inbox.keyState('k')).toMatchObject({ state: 'open', nextSeq: 3, heldSeqs: [] });
    expect(await app.inbox.deadLetters({ key: 'k' })).toEqual([]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });

  it('10b. an operator replay, while a delivery holds the key, of a dead letter its cursor has passed is refused, not stranded', async () => {
    const t = schemas();
    const pool = gatedPool();
    const app = await ledgerInbox(
      { ...t, db: pool },
      { onPoison: 'skip', maxAttempts: 1, lockTimeoutMs: 30_000 },
      failWhen((e) => e.seq === 1),
    );
    // Seq 1 is poison: dead-lettered, its seq recorded as a gap, the cursor at 2.
    expect((await app.inbox.receive(ordered('k', 1))).kind).toBe('dead-lettered');
    expect(await app.inbox.keyState('k')).toMatchObject({ state: 'open', nextSeq: 2 });
    // Seq 3's claim locks the key row (seq 3 is held behind seq 2) and waits before COMMIT.
    const commit = pool.hold(/commit$/);
    const three = app.inbox.receive(ordered('k', 3));
    await commit.reached;
    const replaying = app.inbox.replay('k:1');
    // Before: the replay skipped the locked key row, took the cursor to be seq 1, and re-queued
    // seq 1 held below the cursor (2), where nothing ever applies or dead-letters it.
    // The replay reads the key while the claim holds it: it must wait for the key's row (the
    // interleaving this case is about), then the claim commits.
    const waited = await blockedOnLock(admin, replayKeyRead(t), replaying).finally(() => commit.open());
    expect(waited).toBe(true);
    expect((await three).status).toBe(202);
    const [replayed] = await replaying;
    expect(replayed).toMatchObject({ outcome: 'behind-cursor', status: 'dead' });
    expect(await app.inbox.event('k:1')).toMatchObject({ status: 'dead' });
    expect((await app.inbox.receive(ordered('k', 2))).status).toBe(200);
    await app.inbox.idle();
    expect(await app.seqs('k')).toEqual([2, 3]);
    expect(await invariants(app)).toEqual([]);
    await app.inbox.close();
  });
});

describe.each(targets)('ordering races on $name', (target) => {
  const schemas = perTestSchemas(target);

  it(
    '2. a new id at a poison-blocked seq is refused, so a replay leaves one event at that seq',
    async () => {
      const t = schemas();
      let poison = true;
      const app = await ledgerInbox(
        t,
        { onPoison: 'block', maxAttempts: 1 },
        failWhen((e) => e.id === 'k:2' && poison),
      );
      expect((await app.send(ordered('k', 1), ordered('k', 2))).map((o) => o.kind)).toEqual([
        'processed',
        'dead-lettered',
      ]);
      const other = await app.inbox.receive(ordered('k', 2, 2, 'k:2-other'));
      expect(other).toMatchObject({ status: 422, kind: 'mismatch' });

      poison = false;
      const [replayed] = await app.inbox.replay('k:2');
      expect(replayed.status).toBe('processed');
      expect((await app.inbox.receive(ordered('k', 3))).status).toBe(200);
      const account = await app.ledger.account(await app.db(), 'k');
      expect(account.entries.map((e) => e.id)).toEqual(['k:1', 'k:2', 'k:3']);
      expect(await invariants(app)).toEqual([]);
      await app.inbox.close();
    },
    SETUP,
  );

  it(
    "6. keys left stranded or waiting for a retry cannot starve another key's gap timeout",
    async () => {
      const t = schemas();
      const app = await ledgerInbox(t, { gapTimeoutMs: 60_000 });
      const db = await app.db();
      const { events, keys } = app.inbox.tables;
      const source = app.inbox.options.source;
      expect((await app.inbox.receive(ordered('victim', 3))).status).toBe(202);
      await sql`update ${sql.raw(events)} set received_at = now() - interval '1 hour' where id = 'victim:3'`.execute(
        db,
      );
      // Older than the victim: 600 keys whose only waiting row is below the cursor (what an
      // older version could leave), and 600 whose next event waits for a retry an hour away.
      await sql`insert into ${sql.raw(keys)} (source, key, next_seq, stream)
        select ${source}, 'stranded-' || i, 5, 'stranded-' || i from generate_series(1, 600) i
        union all select ${source}, 'retry-' || i, 1, 'retry-' || i from generate_series(1, 600) i`.execute(
        db,
      );
      await sql`insert into ${sql.raw(events)} (source, id, key, seq, body_hash, status, payload, headers, received_at, run_after, stream)
        select ${source}, 'stranded-' || i, 'stranded-' || i, 1, 'x', 'held', '\\x7b7d'::bytea, '{}'::jsonb, now() - interval '2 hours', null, 'stranded-' || i
          from generate_series(1, 600) i
        union all
        select ${source}, 'retry-' || i, 'retry-' || i, 1, 'x', 'pending', '\\x7b7d'::bytea, '{}'::jsonb, now() - interval '2 hours', now() + interval '1 hour', 'retry-' || i
          from generate_series(1, 600) i`.execute(db);

      // A pass examines 1,000 keys with waiting events and the next goes on after the last one
      // (src/db/sql/sweep.ts): the 1,200 planted keys sort first, so the victim's turn comes in the
      // second pass, and neither pass chooses a planted key.
      const passes = [await app.inbox.sweep(), await app.inbox.sweep()];
      const total = (field: 'gapsSkipped' | 'drained' | 'keyErrors') =>
        passes.reduce((n, pass) => n + pass[field], 0);
      expect({
        gapsSkipped: total('gapsSkipped'),
        drained: total('drained'),
        keyErrors: total('keyErrors'),
      }).toEqual({
        gapsSkipped: 1,
        drained: 1,
        keyErrors: 0,
      });
      expect(await app.seqs('victim')).toEqual([3]);
      // The planted rows are not this test's subject: remove them before the invariants run.
      await sql`delete from ${sql.raw(events)} where id like 'stranded-%' or id like 'retry-%'`.execute(db);
      await app.inbox.close();
    },
    SETUP,
  );

  it(
    '7. deferred mode with onGapTimeout block: the missing seq arriving opens the key and both apply',
    async () => {
      const t = schemas();
      const app = await ledgerInbox(t, {
        mode: 'deferred',
        workers: 1,
        gapTimeoutMs: 1,
        onGapTimeout: 'block',
      });
      expect((await app.inbox.receive(ordered('k', 1))).status).toBe(202);
      await app.inbox.idle();
      expect((await app.inbox.receive(ordered('k', 3))).status).toBe(202);
      await app.inbox.idle();
      expect(await app.inbox.sweep()).toMatchObject({ keysBlocked: 1 });
      expect(await app.inbox.keyState('k')).toMatchObject({ state: 'blocked', blockedSeq: 2 });

      expect((await app.inbox.receive(ordered('k', 2))).status).toBe(202);
      await app.inbox.idle();
      expect(await app.seqs('k')).toEqual([1, 2, 3]);
      expect(await app.inbox.keyState('k')).toMatchObject({ state: 'open', nextSeq: 4 });
      expect(await invariants(app)).toEqual([]);
      await app.inbox.close();
    },
    SETUP,
  );

  it(
    'the sweeper survives one bad key: the error is logged and counted, the other keys are handled',
    async () => {
      const t = schemas();
      const errors: Array<{ key?: string; msg?: string }> = [];
      const logger = {
        debug: () => {},
        info: () => {},
        warn: () => {},
        error: (obj: { key?: string }, msg?: string) => errors.push({ key: obj.key, msg }),
      };
      const app = await ledgerInbox(t, { gapTimeoutMs: 1, logger });
      expect((await app.send(ordered('bad', 3), ordered('good', 3))).map((o) => o.status)).toEqual([
        202, 202,
      ]);
      const db = await app.db();
      const schema = sql.id(t.schema);
      // A fault of our own: any change to the key 'bad' fails (as a corrupt row would).
      await sql`create function ${schema}.refuse_bad() returns trigger language plpgsql as $$
        begin raise exception 'the bad key'; end $$`.execute(db);
      await sql`create trigger refuse_bad before update on ${sql.raw(app.inbox.tables.keys)}
        for each row when (new.key = 'bad') execute function ${schema}.refuse_bad()`.execute(db);

      expect(await app.inbox.sweep()).toMatchObject({ keyErrors: 1, gapsSkipped: 1, drained: 1 });
      expect(await app.seqs('good')).toEqual([3]);
      expect(errors).toEqual([{ key: 'bad', msg: expect.stringMatching(/sweeper could not handle a key/) }]);

      await sql`drop trigger refuse_bad on ${sql.raw(app.inbox.tables.keys)}`.execute(db);
      expect(await app.inbox.sweep()).toMatchObject({ keyErrors: 0, gapsSkipped: 1 });
      expect(await app.seqs('bad')).toEqual([3]);
      await app.inbox.close();
    },
    SETUP,
  );
});
