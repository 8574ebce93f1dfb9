import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { mismatchOf } from '../processed-cache.js';
import type { ClaimArgs, ClaimRow } from './claim.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { idLockKey } from './id-lock.js';
import { defineStatement, fromJsonText, type Statement, type Tables, toBoolean, toNumber } from './tables.js';

/**
 * The try-claim: an unordered delivery applied inline, claimed without the `claim` function
 * when plain statements can decide. It is what almost every such delivery is: a new event
 * (or a processed duplicate that missed the caches). Two prepared statements riding on BEGIN,
 * before the SAVEPOINT, where the claim is one call of a PL/pgSQL function that sets and
 * restores `lock_timeout` and returns a table: bench/postgres-cost.ts measured PostgreSQL's
 * CPU per new event at 310 µs this way against 350 µs through `claim` (bare transaction: 220).
 *
 * 1. `pg_try_advisory_xact_lock` on the id's lock key (src/sql/id-lock.ts), the lock every
 *    claim of the id takes: it never waits, so it needs no lock_timeout.
 * 2. The id's row, read by a statement of its own: under READ COMMITTED its snapshot is taken
 *    after the lock was, so it sees every claim of the id that committed before (a read in the
 *    lock's own statement would use a snapshot taken before the lock, and miss a row committed
 *    in between, when that claim let go of the lock).
 *
 * Then, as the claim would decide (src/sql/claim.ts, the unordered branch and `v_found`):
 * - no row and the lock held: apply, the row written at COMMIT with its result;
 * - a row whose body, key or seq differs: mismatch; processed: duplicate, with its result;
 *   dead: dead. A committed row's hash, key and seq never change, and processed is final, so
 *   these need no lock: they are answered even while another claim holds it.
 * - anything else (the lock is held by another claim and there is no row yet; a waiting row
 *   that this delivery may apply): undefined, and the caller sends the claim, which waits for
 *   the lock (bounded by lock_timeout) and decides; its own SAVEPOINT follows it, so a failed
 *   run rolls back to a savepoint taken after everything the claim locked.
 *
 * Only on our drivers, which send a statement's `first` (src/drivers/fold.ts); through a
 * Kysely instance the user passed, every delivery takes the claim (src/sql/statements.ts).
 *
 * On PGlite (`oneSession`) the lock is not sent: the database is one session, whose advisory
 * locks never conflict with its own, so step 1 could only answer true, and our driver gives
 * that session to one transaction at a time (src/drivers/pglite.ts), so no other claim of the
 * id is ever in flight beside this one. The read alone decides. It was a statement of each new
 * event's first call into the embedded database: about 60-80 µs of 700 per transaction
 * (`npx tsx bench/pglite-cost.ts inbox no-lock`).
 */
export function claimTryingFirst(
  names: StatementNames,
  t: Tables,
  claim: (db: Kysely<any>, a: ClaimArgs) => Promise<ClaimRow>,
  oneSession: boolean,
) {
  const tryClaim = createTryClaim(names, t, oneSession);
  const tryTurn = createTryTurn(names, t, oneSession);
  return async function claimOrTry(db: Kysely<any>, a: ClaimArgs): Promise<ClaimRow> {
    if (a.apply) {
      const decided =
        a.key === null ? await tryClaim(db, a) : a.likelyTurn ? await tryTurn(db, a) : undefined;
      if (decided) return decided;
    }
    return claim(db, a);
  };
}

/** The try-claim's statements and its decision; undefined when the claim must decide. */
function createTryClaim(names: StatementNames, t: Tables, oneSession: boolean) {
  // `locked`, and the id's row.
  const read = (locked: string) => `select ${locked} as locked, ${idRowColumns(t)}`;
  let statement: Statement;
  if (oneSession) {
    // The session's own lock: what the try-lock would answer there (above).
    statement = defineStatement(
      names,
      t,
      'try_claim_one_session',
      read('true'),
      'after-begin',
      APPLY_SAVEPOINT,
    );
  } else {
    const tryLock = defineStatement(
      names,
      t,
      'try_id_lock',
      `select pg_try_advisory_xact_lock(${idLockKey(t, '$1::text', '$2::text')}) as locked`,
      'after-begin',
    );
    // `locked` is the try-lock's, written in by the driver (src/drivers/fold.ts, joinFirst):
    // selected here as a placeholder so that each row keeps its shape.
    statement = defineStatement(
      names,
      t,
      'try_claim',
      read('null::boolean'),
      'after-begin',
      APPLY_SAVEPOINT,
      tryLock.text,
    );
  }
  return async function tryClaim(db: Kysely<any>, a: ClaimArgs): Promise<ClaimRow | undefined> {
    const [row] = await statement.run<any>(db, [a.source, a.id]);
    if (!row) return undefined;
    if (row.status === null)
      return toBoolean(row.locked) ? decided(row, 'apply', null, null, true) : undefined;
    return decideFromRow(row, a);
  };
}

/**
 * The id's row (all null when none) and when it was received (the row's, else this
 * transaction's start, which the row written at COMMIT gets by default) as milliseconds in a
 * float8, which node-postgres reads with parseFloat: a timestamptz is parsed by a regular
 * expression into a Date, and a Date is made from it anyway. One row whether or not the id
 * has one. `$1` is the source, `$2` the id.
 */
function idRowColumns(t: Tables): string {
  return `(extract(epoch from coalesce(e.received_at, now())) * 1000)::float8 as received_ms,
            e.status, e.body_hash, e.key, e.seq, e.result::text as result, e.attempts, e.dead_reason
       from (values (1)) as one left join ${t.events} e on e.source = $1 and e.id = $2`;
}

/**
 * The id has a row: what the claim decides from it alone (src/sql/claim.ts, `v_found`), or
 * undefined when that takes the claim (a waiting row this delivery may apply). A committed
 * row's hash, key and seq never change, and processed is final, so these need no lock: they
 * are answered even while another claim holds it.
 */
function decideFromRow(row: any, a: ClaimArgs): ClaimRow | undefined {
  const reason = mismatchOf({ hash: row.body_hash, key: row.key, seq: toNumber(row.seq) }, a);
  if (reason) return decided(row, 'mismatch', null, reason);
  if (row.status === 'processed') return decided(row, 'duplicate', fromJsonText(row.result), null);
  if (row.status === 'dead') return decided(row, 'dead', null, row.dead_reason);
  return undefined;
}

/**
 * The turn's try: an ordered delivery applied inline whose seq this instance expects next
 * (src/key-cursors.ts), claimed without the `claim` function when plain statements can
 * decide, as the try-claim does for an unordered one. Two prepared statements riding on BEGIN,
 * before the SAVEPOINT:
 *
 * 1. The key row, locked only when the seq is its turn (cursor at it, key open) and nobody
 *    holds it (SKIP LOCKED: it never waits, so it needs no lock_timeout); then, under it, the
 *    id's try-lock. The order is the claim's, key row then id lock (ARCHITECTURE.md, "Locks"):
 *    the lock is tried only for a row the sub-select locked, never for one it skipped, so
 *    this transaction never holds the id's lock while it waits for the key row (the claim
 *    that follows when it cannot decide waits for it, bounded by lock_timeout).
 * 2. Under those locks (a statement of its own, so its snapshot sees every claim of the key or
 *    id that committed before it took them), the id's row, whether another id waits at this
 *    seq, and whether one waits at the next (the drain).
 *
 * Then, as the claim would decide (src/sql/claim.ts, in its turn, and `v_found`):
 * - no row, both locks held, no other id waiting at the seq: apply, the row written at COMMIT
 *   with its result (src/sql/record-applied.ts) and the cursor moved there too, past the seq
 *   (the claim moves it before the handler: nothing in between reads it but this
 *   transaction's own drain, which the cursor's update precedes, riding with the row on its
 *   first statement; a failed run never sends it, so there is nothing to rewind);
 * - a row: as the try-claim decides from it (mismatch, duplicate, dead);
 * - anything else (not its turn after all, the key or id held by another claim, another id
 *   waiting at the seq, a waiting row this delivery may apply): undefined, and the caller
 *   sends the claim, which decides, with its own SAVEPOINT after it.
 *
 * A key that is blocked (a gap timed out, a poison event), or has no row yet, never passes
 * step 1: the claim function takes it, as it takes every seq this instance does not expect.
 * On PGlite (`oneSession`) there are no locks to take (the try-claim says why): the key row is
 * read in the second statement.
 */
function createTryTurn(names: StatementNames, t: Tables, oneSession: boolean) {
  // $1 source, $2 id, $3 key, $4 seq.
  const turn = `select 1 from ${t.keys} k
        where k.source = $1 and k.key = $3 and k.next_seq = $4::bigint and k.state = 'open'`;
  // What waits at the seq and the next, in FROM (one scan of the waiting index), as is the key
  // row on PGlite: an EXECUTE copies its statement's target list every time
  // (FetchPreparedStatementTargetList), and a sub-select there is copied whole
  // (`bench/postgres-cost.ts ordered-try-exists ordered-try-from`).
  const read = (locked: string, from = '') =>
    `select ${locked} as locked, w.seq_taken, w.drain, ${idRowColumns(t)}
       cross join (select bool_or(w.seq = $4::bigint) as seq_taken, bool_or(w.seq = $4::bigint + 1) as drain
                     from ${t.events} w
                    where w.source = $1 and w.key = $3 and w.seq between $4::bigint and $4::bigint + 1
                      and w.status in ('held', 'pending')) as w${from}`;
  let statement: Statement;
  if (oneSession) {
    statement = defineStatement(
      names,
      t,
      'try_turn_one_session',
      read('k.in_turn', ` cross join (select count(*) > 0 as in_turn from (${turn}) as k) as k`),
      'after-begin',
      APPLY_SAVEPOINT,
    );
  } else {
    // A sub-select with FOR UPDATE is never merged into the query around it: its rows are
    // locked (or skipped) before the try-lock is evaluated for them.
    const tryLocks = defineStatement(
      names,
      t,
      'try_turn_lock',
      `select pg_try_advisory_xact_lock(${idLockKey(t, '$1::text', '$2::text')}) as locked
         from (${turn} for update skip locked) as turn`,
      'after-begin',
    );
    statement = defineStatement(
      names,
      t,
      'try_turn',
      read('null::boolean'),
      'after-begin',
      APPLY_SAVEPOINT,
      tryLocks.text,
    );
  }
  return async function tryTurn(db: Kysely<any>, a: ClaimArgs): Promise<ClaimRow | undefined> {
    const [row] = await statement.run<any>(db, [a.source, a.id, a.key, a.seq]);
    if (!row) return undefined;
    if (row.status !== null) return decideFromRow(row, a);
    if (!toBoolean(row.locked) || toBoolean(row.seq_taken)) return undefined;
    return {
      ...decided(row, 'apply', null, null, true),
      expected: a.seq,
      drain: toBoolean(row.drain),
      cursorAtCommit: true,
    };
  };
}

/** What the try-claim decided, as the claim would have answered it. */
function decided(
  row: { attempts: unknown; received_ms: unknown },
  decision: ClaimRow['decision'],
  result: unknown,
  reason: ClaimRow['reason'],
  rowAtCommit = false,
): ClaimRow {
  return {
    decision,
    result,
    expected: null,
    reason,
    attempts: toNumber(row.attempts) ?? 0,
    drain: false,
    receivedAt: new Date(Number(row.received_ms)),
    rowAtCommit,
    cursorAtCommit: false,
  };
}
