import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';
import { type StoredEventRow, TAKEN_EVENT_OUTPUT, type TakenEvent, toTakenEvent } from './taken-event.js';

/**
 * `take_pending`: up to `p_limit` due unordered events no one holds, oldest first. One SKIP LOCKED read,
 * where the executor steps past the events other workers hold. Citus refuses locks across shards: there,
 * candidates are read unlocked, a page at a time, then each is locked by stream and id and checked again.
 */
export function takePendingFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_pending')}(p_source text, p_limit integer)
returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_candidate record;
  v_taken integer := 0;
  v_read integer;
  v_due timestamptz := '-infinity';
  v_id text := '';
  v_ev ${t.events}%rowtype;
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    return query
      select e.id, e.body_hash, e.payload, e.headers, e.attempts, e.received_at from ${t.events} e
       where e.source = p_source and e.status = 'pending' and e.key is null
         and coalesce(e.run_after, e.received_at) <= now()
       order by coalesce(e.run_after, e.received_at), e.id
       limit p_limit
       for update skip locked;
    return;
  end if;
  loop
    v_read := 0;
    for v_candidate in
      select e.stream, e.id, coalesce(e.run_after, e.received_at) as due from ${t.events} e
       where e.source = p_source and e.status = 'pending' and e.key is null
         and coalesce(e.run_after, e.received_at) <= now()
         and coalesce(e.run_after, e.received_at) >= v_due
         and (coalesce(e.run_after, e.received_at) > v_due or e.id > v_id)
       order by coalesce(e.run_after, e.received_at), e.id
       limit p_limit * 4
    loop
      v_read := v_read + 1;
      v_due := v_candidate.due;
      v_id := v_candidate.id;
      select * into v_ev from ${t.events} e
       where e.source = p_source and e.stream = v_candidate.stream and e.id = v_candidate.id
         and e.status = 'pending' and e.key is null and coalesce(e.run_after, e.received_at) <= now()
       for update skip locked;
      continue when not found;
      ${TAKEN_EVENT_OUTPUT}
      return next;
      v_taken := v_taken + 1;
      if v_taken >= p_limit then return; end if;
    end loop;
    exit when v_read < p_limit * 4;
  end loop;
end
$fn$;
`;
}

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
