import type { Tables } from '../sql/tables.js';

/**
 * Migration 0010: a stored event applied later (taken by take_next, take_pending or take_turn)
 * is no longer marked processed by the take and then updated with its result at COMMIT. Each
 * take gets a last parameter, `p_mark_at_commit`: with it, the take locks the row and returns
 * it, still waiting, and the caller marks it processed with its result in one UPDATE riding on
 * COMMIT (src/sql/mark-applied.ts). The earlier signatures become wrappers that call it with
 * `p_mark_at_commit` false, the old behaviour: an instance of an earlier version during a
 * rolling deploy sends no mark, and an event it applied must not stay waiting (it would be
 * applied again). Frozen history: never edit it; today's takes live in src/sql/take-*.ts.
 */
export function markAtCommit(t: Tables): string {
  // Each new function first: its wrapper's body calls it.
  return (
    takeNext(t) +
    previousTakeNext(t) +
    takePending(t) +
    previousTakePending(t) +
    takeTurn(t) +
    previousTakeTurn(t)
  );
}

// The takes as of this migration (copies, frozen: src/sql/ moves on).
function takeNext(t: Tables): string {
  return `
create or replace function ${t.fn('take_next')}(p_source text, p_key text, p_wait boolean, p_keep_payload boolean, p_lock_timeout text,
                                                 p_mark_at_commit boolean)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz, more boolean)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_next bigint;
  v_ev ${t.events}%rowtype;
begin
  if p_wait then
    -- After a delivery's response: wait (bounded) for whoever holds the key; the cursor
    -- decides which event is next, so two drainers cooperate instead of colliding.
    perform set_config('lock_timeout', p_lock_timeout, true);
    select k.next_seq into v_next from ${t.keys} k
      where k.source = p_source and k.key = p_key and k.state = 'open' for update;
    perform set_config('lock_timeout', v_prev_lock_timeout, true);
  else
    -- The sweeper: a locked key is being applied by someone who will drain it.
    select k.next_seq into v_next from ${t.keys} k
      where k.source = p_source and k.key = p_key and k.state = 'open' for update skip locked;
  end if;
  if not found then return; end if;
  -- Holding the key, never wait for an event row (ARCHITECTURE.md, "Locks"): a locked one is
  -- being applied by a worker (take_turn), which waits for this key in advance.
  select * into v_ev from ${t.events} e
    where e.source = p_source and e.key = p_key and e.seq = v_next and e.status in ('held', 'pending')
      and (e.run_after is null or e.run_after <= now())
    for update skip locked;
  if not found then return; end if;
  update ${t.keys} k set next_seq = v_next + 1, updated_at = now() where k.source = p_source and k.key = p_key;
  if not p_mark_at_commit then
    update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
           payload = case when p_keep_payload then e.payload end,
           headers = case when p_keep_payload then e.headers end
     where e.source = p_source and e.id = v_ev.id;
  end if;
  id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;
  seq := v_ev.seq;
  more := exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                  and e.seq = v_next + 1 and e.status in ('held', 'pending'));
  return next;
end
$fn$;
`;
}

function previousTakeNext(t: Tables): string {
  return `
create or replace function ${t.fn('take_next')}(p_source text, p_key text, p_wait boolean, p_keep_payload boolean, p_lock_timeout text)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz, more boolean)
language sql as $fn$
  select * from ${t.fn('take_next')}(p_source, p_key, p_wait, p_keep_payload, p_lock_timeout, false)
$fn$;
`;
}

function takePending(t: Tables): string {
  return `
create or replace function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean, p_limit integer,
                                                    p_mark_at_commit boolean)
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
    if not p_mark_at_commit then
    update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
           payload = case when p_keep_payload then e.payload end,
           headers = case when p_keep_payload then e.headers end
     where e.source = p_source and e.id = v_ev.id;
  end if;
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

function previousTakePending(t: Tables): string {
  return `
create or replace function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean, p_limit integer default 1)
returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language sql as $fn$
  select * from ${t.fn('take_pending')}(p_source, p_keep_payload, p_limit, false)
$fn$;
`;
}

function takeTurn(t: Tables): string {
  return `
create or replace function ${t.fn('take_turn')}(p_source text, p_key text, p_keep_payload boolean, p_mark_at_commit boolean)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_next bigint;
  v_ev ${t.events}%rowtype;
begin
  select k.next_seq into v_next from ${t.keys} k
   where k.source = p_source and k.key = p_key and k.state = 'open';
  if not found then return; end if;
  -- Locked and re-checked: if another worker applied it meanwhile, its status is no longer
  -- waiting and the row is skipped; if one is applying it now, it is skipped too.
  select * into v_ev from ${t.events} e
   where e.source = p_source and e.key = p_key and e.seq = v_next and e.status in ('held', 'pending')
     and (e.run_after is null or e.run_after <= now())
   for update skip locked;
  if not found then return; end if;
  if not p_mark_at_commit then
    update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
           payload = case when p_keep_payload then e.payload end,
           headers = case when p_keep_payload then e.headers end
     where e.source = p_source and e.id = v_ev.id;
  end if;
  id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;
  seq := v_ev.seq;
  return next;
end
$fn$;
`;
}

function previousTakeTurn(t: Tables): string {
  return `
create or replace function ${t.fn('take_turn')}(p_source text, p_key text, p_keep_payload boolean)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language sql as $fn$
  select * from ${t.fn('take_turn')}(p_source, p_key, p_keep_payload, false)
$fn$;
`;
}
