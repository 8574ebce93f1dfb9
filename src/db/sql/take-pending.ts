import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';
import { type StoredEventRow, TAKEN_EVENT_OUTPUT, type TakenEvent, toTakenEvent } from './taken-event.js';

/**
 * `take_pending`: takes up to `p_limit` due, unordered, pending events that no one else holds
 * (SKIP LOCKED, so every instance's workers share the work), oldest due first, locks them and
 * returns them with their payloads, so that the caller runs their handlers in the same
 * transaction and marks each one processed, with its result, as it is applied (see
 * TAKEN_EVENT_OUTPUT: one UPDATE riding on the next event's SAVEPOINT or on COMMIT). The one
 * SELECT picks every row of the batch before any is marked. One event for the sweeper and
 * `inbox.replay`; a batch for the workers
 * (`workerBatchSize`, src/background/turns.ts). The LIMIT sits above the row locks: it counts
 * the rows locked, not the rows skipped.
 */
export function takePendingFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_pending')}(p_source text, p_limit integer)
returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_ev ${t.events}%rowtype;
begin
  for v_ev in
    select * from ${t.events} e
     where e.source = p_source and e.status = 'pending' and e.key is null
       and coalesce(e.run_after, e.received_at) <= now()
     order by coalesce(e.run_after, e.received_at)
     limit p_limit
     for update skip locked
  loop
    ${TAKEN_EVENT_OUTPUT}
    return next;
  end loop;
end
$fn$;
`;
}

/**
 * One round trip, inside the transaction that then runs the handlers: up to `limit` events,
 * oldest due first.
 */
export function createTakePending(names: StatementNames, t: Tables) {
  const statement = defineStatement<StoredEventRow>(
    names,
    t,
    'take_pending',
    `select id, body_hash, payload, headers::text as headers, attempts, received_at
       from ${t.fn('take_pending')}($1, $2)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function takePending(db: Queryable, source: string, limit: number): Promise<TakenEvent[]> {
    const rows = await statement.run(db, [source, limit]);
    return rows.map((row) => toTakenEvent(row, null, null));
  };
}
