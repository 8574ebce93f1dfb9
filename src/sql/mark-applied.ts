import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables } from './tables.js';

/**
 * A stored event applied now (taken by `take_next`, `take_pending` or `take_turn`, which lock
 * its row but leave it waiting): marked processed with its result in one UPDATE, riding on
 * COMMIT, or on the next event's SAVEPOINT in a batch (src/drivers/pg.ts). The take used to
 * mark it and `store_result` then updated it a second time, in the same transaction: a second
 * write of the row costs about as much as the row itself (bench/postgres-cost.ts). Sent even
 * when the handler returned nothing (the result is then null, as the waiting row's is).
 *
 * Sent only after the handler (and `advance`) succeeded, so a handler that throws leaves the
 * row exactly as it was waiting: `fail` counts the attempt on it (src/sql/failed-run.ts).
 * Payload and headers are dropped here unless `keepPayload`, as the take used to drop them.
 */
export function createMarkApplied(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'mark_applied',
    `update ${t.events} set status = 'processed', processed_at = now(), run_after = null, result = $3::jsonb,
       payload = case when $4::boolean then payload end, headers = case when $4::boolean then headers end
     where source = $1 and id = $2`,
    'before-commit',
  );
  return async function markApplied(
    db: Kysely<any>,
    a: {
      source: string;
      id: string;
      /** The handler's result as JSON; null when it returned nothing. */
      json: string | null;
      keepPayload: boolean;
    },
  ): Promise<void> {
    await statement.run(db, [a.source, a.id, a.json, a.keepPayload]);
  };
}
