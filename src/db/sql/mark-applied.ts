import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * A stored event applied now (taken by `take_next`, `take_pending` or `take_turn`, which lock
 * its row but leave it waiting): marked processed with its result in one UPDATE, riding on
 * COMMIT, or on the next event's SAVEPOINT in a batch (src/db/drivers/fold.ts): the row is written
 * once, where a mark in the take and its result after the handler would write it twice, and a
 * second write of the row costs about as much as the row itself (BENCHMARKS.md). Sent
 * even when the handler returned nothing (the result is then null, as the waiting row's is).
 *
 * Sent only after the handler (and `advance`) succeeded, so a handler that throws leaves the
 * row exactly as it was waiting: `fail` counts the attempt on it (src/db/sql/failed-run.ts).
 * Payload and headers are dropped here unless `keepPayload`; an
 * event no handler takes is marked `ignored` instead, its payload and headers kept (given again
 * when a claim had marked the row and dropped them: latest-wins, a waiting row claimed again),
 * for a replay once a handler exists.
 */
export function createMarkApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'mark_applied',
    `update ${t.events} set status = $5, processed_at = now(), run_after = null, result = $3::jsonb, type = $6,
       payload = case when $4::boolean then coalesce($7, payload) end,
       headers = case when $4::boolean then coalesce($8::jsonb, headers) end
     where source = $1 and id = $2`,
    { rides: 'commit' },
  );
  return async function markApplied(
    db: Queryable,
    a: {
      source: string;
      id: string;
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
    ]);
  };
}
