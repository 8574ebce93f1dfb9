import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** A new inline event's row, with its result, riding on COMMIT; no ON CONFLICT: a race fails COMMIT (409). */
export function createRecordApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'record_applied',
    `insert into ${t.events} (source, id, key, seq, body_hash, status, processed_at, result, payload, headers, type, stream)
     values ($1, $2, $3, $4::bigint, $5, $9, now(), $6::jsonb, $7, $8::jsonb, $10, ${stream('$3', '$2')})`,
    { rides: 'commit' },
  );
  return async function recordApplied(
    db: Queryable,
    a: {
      source: string;
      id: string;
      key: string | null;
      seq: number | null;
      hash: string;
      /** The handler's result as JSON; null when it returned nothing. */
      json: string | null;
      /** With `keepPayload`, or for an ignored event. */
      payload: Buffer | null;
      headers: Record<string, string> | null;
      status: 'processed' | 'ignored';
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
