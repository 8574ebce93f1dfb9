import { toBoolean, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';
import { type StoredEventRow, TAKEN_EVENT_OUTPUT, type TakenEvent, toTakenEvent } from './taken-event.js';

/** `take_next`: locks the key and the due event at its cursor, advancing it. */
export function takeNextFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_next')}(p_source text, p_key text, p_wait boolean, p_lock_timeout text)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz, more boolean)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_next bigint;
  v_ev ${t.events}%rowtype;
  v_stream text := ${stream('p_key')};
begin
  if p_wait then
    -- After a delivery's response: wait (bounded) for whoever holds the key; the cursor
    -- decides which event is next, so two drainers cooperate instead of colliding.
    perform set_config('lock_timeout', p_lock_timeout, true);
    select k.next_seq into v_next from ${t.keys} k
      where k.source = p_source and k.stream = v_stream and k.key = p_key and k.state = 'open' for update;
    perform set_config('lock_timeout', v_prev_lock_timeout, true);
  else
    -- The sweeper: a locked key is being applied by someone who will drain it.
    select k.next_seq into v_next from ${t.keys} k
      where k.source = p_source and k.stream = v_stream and k.key = p_key and k.state = 'open' for update skip locked;
  end if;
  if not found then return; end if;
  -- Holding the key, never wait for an event row (ARCHITECTURE.md, "Locks"): a locked one is
  -- being applied by a worker (take_turn), which waits for this key in advance.
  select * into v_ev from ${t.events} e
    where e.source = p_source and e.stream = v_stream and e.key = p_key and e.seq = v_next and e.status in ('held', 'pending')
      and (e.run_after is null or e.run_after <= now())
    for update skip locked;
  if not found then return; end if;
  update ${t.keys} k set next_seq = v_next + 1, updated_at = now() where k.source = p_source and k.stream = v_stream and k.key = p_key;
  ${TAKEN_EVENT_OUTPUT}
  seq := v_ev.seq;
  more := exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
                  and e.seq = v_next + 1 and e.status in ('held', 'pending'));
  return next;
end
$fn$;
`;
}

export function createTakeNext(names: StatementNames, t: Tables) {
  const statement = defineStatement<StoredEventRow & { seq: unknown; more: unknown }>(
    names,
    t,
    'take_next',
    `select id, seq, body_hash, payload, headers::text as headers, attempts, received_at, more
       from ${t.fn('take_next')}($1, $2, $3, $4)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function takeNext(
    db: Queryable,
    source: string,
    key: string,
    wait: boolean,
    lockTimeout: string,
  ): Promise<{ event: TakenEvent; more: boolean } | undefined> {
    const [row] = await statement.run(db, [source, key, wait, lockTimeout]);
    if (!row) return undefined;
    return { event: toTakenEvent(row, key, toNumber(row.seq)), more: toBoolean(row.more) };
  };
}
