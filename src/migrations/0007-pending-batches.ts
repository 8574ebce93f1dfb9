import type { Tables } from '../sql/tables.js';

/**
 * Migration 0007: `take_pending` takes up to `p_limit` due unordered events in one statement
 * (deferred mode's workers apply them in one transaction, one savepoint each: `workerBatchSize`).
 * The two-argument function is dropped and the new one's `p_limit` defaults to 1, so an older
 * instance's `take_pending(source, keep)` still resolves (to one event) during a rolling
 * deploy. Frozen history: never edit it; today's take_pending lives in src/sql/take-pending.ts.
 */
export function pendingBatches(t: Tables): string {
  return `
drop function ${t.fn('take_pending')}(text, boolean);

create or replace function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean, p_limit integer default 1)
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
    update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
         payload = case when p_keep_payload then e.payload end,
         headers = case when p_keep_payload then e.headers end
   where e.source = p_source and e.id = v_ev.id;
  id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;
    return next;
  end loop;
end
$fn$;
`;
}
