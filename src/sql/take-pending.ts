import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Tables } from './tables.js';
import { markTakenAndReturn, type StoredEventRow, type TakenEvent, toTakenEvent } from './taken-event.js';

/**
 * `take_pending`: takes one due, unordered, pending event that no one else holds (SKIP LOCKED,
 * so every instance's workers share the work), marks it processed and returns it with its
 * payload, so that the caller runs the handler in the same transaction.
 */
export function takePendingFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean)
returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_ev ${t.events}%rowtype;
begin
  select * into v_ev from ${t.events} e
   where e.source = p_source and e.status = 'pending' and e.key is null
     and coalesce(e.run_after, e.received_at) <= now()
   order by coalesce(e.run_after, e.received_at)
   limit 1
   for update skip locked;
  if not found then return; end if;
  ${markTakenAndReturn(t)}
  return next;
end
$fn$;
`;
}

/** One round trip, inside the transaction that then runs the handler. */
export function createTakePending(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'take_pending',
    `select * from ${t.fn('take_pending')}($1, $2)`,
    'after-begin',
    APPLY_SAVEPOINT,
  );
  return async function takePending(
    db: Kysely<any>,
    source: string,
    keepPayload: boolean,
  ): Promise<TakenEvent | undefined> {
    const [row] = await statement.run<StoredEventRow>(db, [source, keepPayload]);
    return row ? toTakenEvent(row, null, null) : undefined;
  };
}
