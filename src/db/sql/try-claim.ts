import { mismatchOf } from '../../dedup/mismatch.js';
import { fromJsonText, toBoolean, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import type { ClaimArgs, ClaimRow } from './claim.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { idLockKey } from './id-lock.js';
import { defineStatement, type Queryable, type Statement, type Tables } from './tables.js';

/**
 * Unordered inline claims by plain statements where they can decide (the id's try-lock, then its row);
 * undefined sends `claim`.
 */
/** All null without a row; `locked` where the session's own lock answers. */
interface TryClaimResult {
  locked?: unknown;
  received_ms: unknown;
  status: 'pending' | 'held' | 'processed' | 'dead' | 'ignored' | null;
  body_hash: string;
  key: string | null;
  seq: unknown;
  result: string | null;
  attempts: unknown;
  dead_reason: string | null;
}

export function createTryClaim(names: StatementNames, t: Tables, oneSession: boolean) {
  // One row whether or not the id has one; received_ms as a float8, cheaper to read than a timestamptz.
  const read = (locked: string) =>
    `select ${locked}(extract(epoch from coalesce(e.received_at, now())) * 1000)::float8 as received_ms,
            e.status, e.body_hash, e.key, e.seq, e.result::text as result, e.attempts, e.dead_reason
       from (values (1)) as one left join ${t.events} e on e.source = $1 and e.id = $2`;
  let statement: Statement<TryClaimResult>;
  if (oneSession) {
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
    if (row.status === 'ignored') return decided(row, 'duplicate', null, 'ignored');
    if (row.status === 'dead') return decided(row, 'dead', null, row.dead_reason);
    return undefined;
  };
}

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
