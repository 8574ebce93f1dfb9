import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables } from './tables.js';

/**
 * The row of a new unordered event applied inline, written once, with its result, riding on
 * COMMIT like `store_result` (one INSERT where the claim used to insert the row and the
 * result cost an UPDATE of it). The claim left it unwritten under an advisory lock on its id
 * (src/sql/claim.ts, `row_at_commit`); sent even when the handler returned nothing.
 *
 * No ON CONFLICT: a claim that does not take that lock (an ordered or latest-wins delivery of
 * the same id, a deferred-mode instance) may have inserted the id meanwhile. The primary key
 * then fails this INSERT, and with it COMMIT: the handler's writes roll back, the event is
 * applied by the other delivery only, and this one is answered 409 in-flight (23505 is one of
 * the contended SQLSTATEs, src/sql/sql-state.ts). Its retry gets the other's outcome.
 */
export function createRecordApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'record_applied',
    `insert into ${t.events} (source, id, body_hash, status, processed_at, result, payload, headers)
     values ($1, $2, $3, 'processed', now(), $4::jsonb, $5, $6::jsonb)`,
    'before-commit',
  );
  return async function recordApplied(
    db: Kysely<any>,
    a: {
      source: string;
      id: string;
      hash: string;
      /** The handler's result as JSON; null when it returned nothing. */
      json: string | null;
      /** With `keepPayload` only: the raw body and its storable headers. */
      payload: Buffer | null;
      headers: Record<string, string> | null;
    },
  ): Promise<void> {
    await statement.run(db, [
      a.source,
      a.id,
      a.hash,
      a.json,
      a.payload,
      a.headers === null ? null : JSON.stringify(a.headers),
    ]);
  };
}
