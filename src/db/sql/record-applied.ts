import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * The row of a new event applied inline, written once, with its result, riding on COMMIT like
 * `store_result` (one INSERT, where a row inserted by the claim would cost an UPDATE more for
 * its result). The claim left it unwritten (src/db/sql/claim.ts, `row_at_commit`) under the
 * id's advisory lock, which every claim of the id takes (src/db/sql/id-lock.ts), and, ordered in
 * its turn, its key row (with its key and seq here); sent even when the handler returned nothing,
 * and for an event no handler takes (`ignored`, with its payload for a later replay).
 *
 * No ON CONFLICT: the primary key stays the last guard. Should anything that took no id lock
 * have inserted the id meanwhile (no claim does), or be inserting it at
 * its own COMMIT, the primary key
 * fails this INSERT, and with it COMMIT: the handler's writes roll back, the event is
 * applied by the other delivery only, and this one is answered 409 in-flight (23505 is one of
 * the contended SQLSTATEs, src/db/sql/sql-state.ts). Its retry gets the other's outcome.
 */
export function createRecordApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'record_applied',
    `insert into ${t.events} (source, id, key, seq, body_hash, status, processed_at, result, payload, headers, type)
     values ($1, $2, $3, $4::bigint, $5, $9, now(), $6::jsonb, $7, $8::jsonb, $10)`,
    { rides: 'commit' },
  );
  return async function recordApplied(
    db: Queryable,
    a: {
      source: string;
      id: string;
      /** An ordered event's key and seq (its cursor moved in the claim); null for an unordered one. */
      key: string | null;
      seq: number | null;
      hash: string;
      /** The handler's result as JSON; null when it returned nothing. */
      json: string | null;
      /** With `keepPayload`, or for an ignored event: the raw body and its storable headers. */
      payload: Buffer | null;
      headers: Record<string, string> | null;
      /** `ignored`: no handler takes its type (src/options/handlers.ts); nothing was applied. */
      status: 'processed' | 'ignored';
      /** The event's type, when it has one. */
      type: string | null;
    },
  ): Promise<void> {
    await statement.run(db, [
      a.source,
      a.id,
      a.key,
      a.seq,
      a.hash,
      a.json,
      a.payload,
      a.headers === null ? null : JSON.stringify(a.headers),
      a.status,
      a.type,
    ]);
  };
}
