import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** A taken event marked processed (or `ignored`) with its result, riding on COMMIT: written once. */
export function createMarkApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'mark_applied',
    `update ${t.events} set status = $5, processed_at = now(), run_after = null, result = $3::jsonb, type = $6,
       payload = case when $4::boolean then coalesce($7, payload) end,
       headers = case when $4::boolean then coalesce($8::jsonb, headers) end
     where source = $1 and stream = ${stream('$9::text', '$2')} and id = $2`,
    { rides: 'commit' },
  );
  return async function markApplied(
    db: Queryable,
    a: {
      source: string;
      id: string;
      key: string | null;
      json: string | null;
      keepPayload: boolean;
      status: 'processed' | 'ignored';
      type: string | null;
      /** An ignored event's, written back where a claim had dropped them. */
      payload: Buffer | null;
      headers: Record<string, string> | null;
    },
  ): Promise<void> {
    const ignored = a.status === 'ignored';
    await statement.run(db, [
      a.source,
      a.id,
      a.json,
      a.keepPayload || ignored,
      a.status,
      a.type,
      a.payload,
      a.headers === null ? null : JSON.stringify(a.headers),
      a.key,
    ]);
  };
}
