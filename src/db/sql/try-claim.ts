import { mismatchOf } from '../../dedup/mismatch.js';
import { fromJsonText, toBoolean, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import type { ClaimArgs, ClaimRow } from './claim.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { idLockKey } from './id-lock.js';
import { defineStatement, type Queryable, type Statement, type Tables } from './tables.js';

/**
 * The try-claim: an unordered delivery applied inline, claimed without the `claim` function
 * when plain statements can decide. It is what almost every such delivery is: a new event
 * (or a processed duplicate that missed the caches). Two prepared statements riding on BEGIN,
 * before the SAVEPOINT, where the claim is one call of a PL/pgSQL function that sets and
 * restores `lock_timeout` and returns a table: BENCHMARKS.md has PostgreSQL's
 * CPU per new event at 310 µs this way against 350 µs through `claim` (bare transaction: 220).
 *
 * 1. `pg_try_advisory_xact_lock` on the id's lock key (src/db/sql/id-lock.ts), the lock every
 *    claim of the id takes: it never waits, so it needs no lock_timeout.
 * 2. The id's row, read by a statement of its own: under READ COMMITTED its snapshot is taken
 *    after the lock was, so it sees every claim of the id that committed before (a read in the
 *    lock's own statement would use a snapshot taken before the lock, and miss a row committed
 *    in between, when that claim let go of the lock).
 *
 * Then, as the claim would decide (src/db/sql/claim.ts, the unordered branch and `v_found`):
 * - no row and the lock held: apply, the row written at COMMIT with its result;
 * - a row whose body, key or seq differs: mismatch; processed: duplicate, with its result;
 *   ignored: duplicate, reason `ignored`; dead: dead. A committed row's hash, key and seq never change, and processed is final, so
 *   these need no lock: they are answered even while another claim holds it.
 * - anything else (the lock is held by another claim and there is no row yet; a waiting row
 *   that this delivery may apply): undefined, and the caller sends the claim, which waits for
 *   the lock (bounded by lock_timeout) and decides; its own SAVEPOINT follows it, so a failed
 *   run rolls back to a savepoint taken after everything the claim locked.
 *
 * Only on our drivers, which send a statement's `first` (src/db/drivers/fold.ts): there the
 * unordered inline path sends it before the claim (src/receive/claim.ts); through a Kysely
 * instance the user passed, every delivery takes the claim (src/db/sql/statements.ts).
 *
 * On PGlite (`oneSession`) the lock is not sent: the database is one session, whose advisory
 * locks never conflict with its own, so step 1 could only answer true, and our driver gives
 * that session to one transaction at a time (src/db/drivers/pglite.ts), so no other claim of the
 * id is ever in flight beside this one. The read alone decides. It was a statement of each new
 * event's first call into the embedded database: about 60-80 µs of 700 per transaction
 * (`npx tsx bench/pglite-cost.ts inbox no-lock`).
 */
/**
 * The row the try-claim reads: the id's row, every column null when it has none; `locked` only
 * where the session's own lock answers (PGlite), else the try-lock's answer comes beside it.
 */
interface TryClaimResult {
  locked?: unknown;
  received_ms: unknown;
  status: 'pending' | 'held' | 'processed' | 'dead' | 'ignored' | null;
  body_hash: string;
  key: string | null;
  seq: unknown;
  /** jsonb read back as text (`fromJsonText`). */
  result: string | null;
  attempts: unknown;
  dead_reason: string | null;
}

export function createTryClaim(names: StatementNames, t: Tables, oneSession: boolean) {
  // One row whether or not the id has one: the id's row (all null when none), after `locked`
  // where the session's own lock answers (PGlite).
  // When it was received (the row's, else this transaction's start, which the row written at
  // COMMIT gets by default) as milliseconds in a float8, which node-postgres reads with
  // parseFloat: a timestamptz is parsed by a regular expression into a Date, and a Date is
  // made from it anyway.
  const read = (locked: string) =>
    `select ${locked}(extract(epoch from coalesce(e.received_at, now())) * 1000)::float8 as received_ms,
            e.status, e.body_hash, e.key, e.seq, e.result::text as result, e.attempts, e.dead_reason
       from (values (1)) as one left join ${t.events} e on e.source = $1 and e.id = $2`;
  let statement: Statement<TryClaimResult>;
  if (oneSession) {
    // The session's own lock: what the try-lock would answer there (above).
    statement = defineStatement<TryClaimResult>(names, t, 'try_claim_one_session', read('true as locked, '), {
      rides: 'begin',
      after: APPLY_SAVEPOINT,
    });
  } else {
    const tryLock = defineStatement<{ locked: unknown }>(
      names,
      t,
      'try_id_lock',
      `select pg_try_advisory_xact_lock(${idLockKey(t, '$1::text', '$2::text')}) as locked`,
      { rides: 'begin' },
    );
    // `locked` is the try-lock's answer, which the driver returns beside the read's rows.
    statement = defineStatement<TryClaimResult>(names, t, 'try_claim', read(''), {
      rides: 'begin',
      after: APPLY_SAVEPOINT,
      first: tryLock,
    });
  }
  return async function tryClaim(db: Queryable, a: ClaimArgs): Promise<ClaimRow | undefined> {
    const { rows, first } = await statement.result(db, [a.source, a.id]);
    const row = rows[0];
    if (!row) return undefined;
    if (row.status === null) {
      const locked = (first?.rows[0] as { locked?: unknown } | undefined)?.locked ?? row.locked;
      return toBoolean(locked) ? decided(row, 'apply', null, null, true) : undefined;
    }
    const reason = mismatchOf({ hash: row.body_hash, key: row.key, seq: toNumber(row.seq) }, a);
    if (reason) return decided(row, 'mismatch', null, reason);
    if (row.status === 'processed') return decided(row, 'duplicate', fromJsonText(row.result), null);
    // Final as a processed row is: a redelivery is answered ignored again, as the claim answers it.
    if (row.status === 'ignored') return decided(row, 'duplicate', null, 'ignored');
    if (row.status === 'dead') return decided(row, 'dead', null, row.dead_reason);
    return undefined;
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
  };
}
