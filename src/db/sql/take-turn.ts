import { toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';
import { type StoredEventRow, TAKEN_EVENT_OUTPUT, type TakenEvent, toTakenEvent } from './taken-event.js';

/** `take_turn` (then `advance`): `take_next` without the key row locked during the handler. */
export function takeTurnFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_turn')}(p_source text, p_key text)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_next bigint;
  v_ev ${t.events}%rowtype;
  v_stream text := ${stream('p_key')};
begin
  select k.next_seq into v_next from ${t.keys} k
   where k.source = p_source and k.stream = v_stream and k.key = p_key and k.state = 'open';
  if not found then return; end if;
  -- Locked and re-checked: if another worker applied it meanwhile, its status is no longer
  -- waiting and the row is skipped; if one is applying it now, it is skipped too.
  select * into v_ev from ${t.events} e
   where e.source = p_source and e.stream = v_stream and e.key = p_key and e.seq = v_next and e.status in ('held', 'pending')
     and (e.run_after is null or e.run_after <= now())
   for update skip locked;
  if not found then return; end if;
  ${TAKEN_EVENT_OUTPUT}
  seq := v_ev.seq;
  return next;
end
$fn$;
`;
}

export function createTakeTurn(names: StatementNames, t: Tables) {
  const statement = defineStatement<StoredEventRow & { seq: unknown }>(
    names,
    t,
    'take_turn',
    `select id, seq, body_hash, payload, headers::text as headers, attempts, received_at
       from ${t.fn('take_turn')}($1, $2)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function takeTurn(
    db: Queryable,
    source: string,
    key: string,
  ): Promise<TakenEvent | undefined> {
    const [row] = await statement.run(db, [source, key]);
    return row ? toTakenEvent(row, key, toNumber(row.seq)) : undefined;
  };
}
