import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * A stored event applied now (a take locked it, left waiting): marked processed with its result in
 * one UPDATE riding on COMMIT or the next SAVEPOINT, so the row is written once (a second write costs
 * about as much as the row). Sent only after the handler succeeded. An event no handler takes is
 * marked `ignored`, its payload and headers kept for a replay.
 */
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
      /** An ordered event's key (its row's stream); null for an unordered one. */
      key: string | null;
      /** The handler's result as JSON; null when it returned nothing. */
      json: string | null;
      keepPayload: boolean;
      /** `ignored`: no handler takes its type; its payload is then kept whatever `keepPayload` says. */
      status: 'processed' | 'ignored';
      type: string | null;
      /** An ignored event's payload and headers, written back where a claim had dropped them. */
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
