import type { Tables } from '../sql/tables.js';

/**
 * Migration 0001, the baseline: the tables, their indexes, the functions and the trigger as
 * they stood when the first four development migrations were squashed (before any release).
 * Frozen history: never edit it. Today's functions live beside their callers in src/db/sql/ (see
 * src/db/sql/functions.ts); a change there ships as a new migration, and
 * test/sql-functions-match-migrations.test.ts checks that a migrated database has exactly
 * today's definitions. Schema and prefix are validated identifiers (options.ts), so they are
 * safe inside the string literal of notify_pending's channel name.
 */
export function baseline(t: Tables): string {
  return `
create table ${t.events} (
  source       text        not null,
  id           text        not null,
  key          text,
  seq          bigint,
  body_hash    text        not null,
  status       text        not null check (status in ('pending', 'held', 'processed', 'dead')),
  payload      bytea,
  headers      jsonb,
  result       jsonb,
  attempts     integer     not null default 0,
  last_error   text,
  dead_reason  text,
  run_after    timestamptz,
  received_at  timestamptz not null default now(),
  processed_at timestamptz,
  primary key (source, id)
);
-- The reorder buffer and the work queue: events waiting for their turn, by key and seq.
create index ${t.local('events_waiting')} on ${t.events} (source, key, seq) where status in ('held', 'pending');
-- Retention prunes processed rows by age.
create index ${t.local('events_processed_at')} on ${t.events} (processed_at) where status = 'processed';
-- Dead letters, for the operator.
create index ${t.local('events_dead')} on ${t.events} (source, received_at) where status = 'dead';

create table ${t.keys} (
  source         text        not null,
  key            text        not null,
  next_seq       bigint      not null,
  state          text        not null default 'open' check (state in ('open', 'blocked')),
  blocked_seq    bigint,
  blocked_reason text        check (blocked_reason in ('gap', 'poison')),
  updated_at     timestamptz not null default now(),
  primary key (source, key)
);

create table ${t.gaps} (
  source     text        not null,
  key        text        not null,
  from_seq   bigint      not null,
  to_seq     bigint      not null,
  reason     text        not null check (reason in ('timeout', 'skip', 'poison')),
  created_at timestamptz not null default now(),
  primary key (source, key, from_seq),
  check (from_seq <= to_seq)
);

-- Unordered pending events, in the order they become due: a new event is due when received,
-- a failed one at run_after. Workers take the first due one with SKIP LOCKED.
create index ${t.local('events_pending_due')} on ${t.events} (source, (coalesce(run_after, received_at)))
  where status = 'pending' and key is null;
-- Operators list blocked keys (webhook-inbox keys list); the keys table is never pruned.
create index ${t.local('keys_blocked')} on ${t.keys} (source, key) where state = 'blocked';

create or replace function ${t.fn('claim')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text,
  p_payload bytea, p_headers jsonb, p_apply boolean, p_keep_payload boolean,
  p_first_seen boolean, p_max_held integer, p_max_ahead bigint, p_lock_timeout text
) returns table (decision text, result jsonb, expected bigint, reason text, attempts integer, drain boolean, received_at timestamptz)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_next bigint;
  v_state text;
  v_blocked_reason text;
  v_ev ${t.events}%rowtype;
  v_found boolean := false;
  v_created boolean := false;
  v_turn boolean;
  v_held integer;
begin
  -- Bounds the wait for a concurrent delivery of the same id or key (-> 409 in-flight);
  -- restored below so that the handler's own statements are not affected.
  perform set_config('lock_timeout', p_lock_timeout, true);
  drain := false;
  attempts := 0;
  received_at := now();

  if p_key is not null then
    -- The key row is the key's lock: one event of a key is applied at a time, and the cursor
    -- moves only under it. It is locked before any event row; drains lock in the same order.
    select k.next_seq, k.state, k.blocked_reason into v_next, v_state, v_blocked_reason
      from ${t.keys} k where k.source = p_source and k.key = p_key for update;
    if not found then
      insert into ${t.keys} as k (source, key, next_seq)
        values (p_source, p_key, case when p_first_seen then p_seq else 1 end)
        on conflict (source, key) do nothing;
      v_created := found;
      select k.next_seq, k.state, k.blocked_reason into v_next, v_state, v_blocked_reason
        from ${t.keys} k where k.source = p_source and k.key = p_key for update;
    end if;
    expected := v_next;
    v_turn := p_seq = v_next and (v_state = 'open' or v_blocked_reason = 'gap');

    select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
    v_found := found;
    if not v_found then
      if p_seq < v_next then
        if exists (select 1 from ${t.gaps} g
                   where g.source = p_source and g.key = p_key and p_seq between g.from_seq and g.to_seq) then
          -- Late: its seq was skipped by a gap timeout. Applying it now would break the order.
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, dead_reason)
            values (p_source, p_id, p_key, p_seq, p_hash, 'dead', p_payload, p_headers, 'late');
          decision := 'dead';
          reason := 'late';
        else
          -- Below the cursor and not skipped: applied long ago, its row since pruned. The cursor
          -- is the permanent dedup record of an ordered key.
          decision := 'duplicate';
        end if;
      elsif exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                    and e.seq = p_seq and e.status in ('held', 'pending')) then
        -- Another id already waits at this seq. Taking this one too would leave one of them
        -- held below the cursor forever once the other is applied.
        decision := 'mismatch';
        reason := 'seq-taken';
      elsif v_turn then
        if p_apply then
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, processed_at)
            values (p_source, p_id, p_key, p_seq, p_hash, 'processed',
                    case when p_keep_payload then p_payload end, case when p_keep_payload then p_headers end, now());
          decision := 'apply';
        else
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers)
            values (p_source, p_id, p_key, p_seq, p_hash, 'pending', p_payload, p_headers);
          decision := 'pending';
        end if;
      elsif p_seq - v_next > p_max_ahead then
        decision := 'buffer-full';
        reason := 'seq-ahead';
      else
        select count(*) into v_held from ${t.events} e
          where e.source = p_source and e.key = p_key and e.status in ('held', 'pending');
        if v_held >= p_max_held then
          decision := 'buffer-full';
          reason := 'held-per-key';
        else
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers)
            values (p_source, p_id, p_key, p_seq, p_hash, 'held', p_payload, p_headers);
          decision := 'held';
        end if;
      end if;
    end if;
  else
    insert into ${t.events} as e (source, id, body_hash, status, payload, headers, processed_at)
      values (p_source, p_id, p_hash,
              case when p_apply then 'processed' else 'pending' end,
              case when p_keep_payload or not p_apply then p_payload end,
              case when p_keep_payload or not p_apply then p_headers end,
              case when p_apply then now() end)
      on conflict (source, id) do nothing;
    if found then
      decision := case when p_apply then 'apply' else 'pending' end;
    else
      -- The id exists. If a concurrent claim holds it, this waits for that transaction
      -- (bounded by lock_timeout) and then sees what it committed.
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
      v_found := found;
      if not v_found then
        raise exception 'event row pruned during claim' using errcode = '55P03';
      end if;
    end if;
  end if;

  if v_found then
    attempts := v_ev.attempts;
    received_at := v_ev.received_at;
    if v_ev.body_hash <> p_hash then
      decision := 'mismatch';
      reason := 'body';
    elsif v_ev.key is distinct from p_key then
      decision := 'mismatch';
      reason := 'key';
    elsif v_ev.seq is distinct from p_seq then
      decision := 'mismatch';
      reason := 'seq';
    elsif v_ev.status = 'processed' then
      decision := 'duplicate';
      result := v_ev.result;
    elsif v_ev.status = 'dead' then
      decision := 'dead';
      reason := v_ev.dead_reason;
    elsif p_apply and (p_key is null or v_turn) then
      -- Waiting (an earlier run failed, or a drain has not reached it yet) and its turn has
      -- come: this delivery applies it.
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
             payload = case when p_keep_payload then e.payload end,
             headers = case when p_keep_payload then e.headers end
        where e.source = p_source and e.id = p_id;
      decision := 'apply';
    else
      decision := v_ev.status;  -- 'held' or 'pending': it stays buffered
    end if;
  end if;

  if v_created and decision in ('mismatch', 'buffer-full') then
    -- A refused delivery leaves nothing behind, not even a cursor (it would fix the first seq
    -- of the key under firstSeq 'first-seen').
    delete from ${t.keys} k where k.source = p_source and k.key = p_key;
  end if;

  if decision = 'apply' and p_key is not null then
    update ${t.keys} k set next_seq = p_seq + 1, state = 'open', blocked_seq = null, blocked_reason = null,
           updated_at = now()
      where k.source = p_source and k.key = p_key;
    -- Tells the caller whether to drain after its response, saving a query when there is nothing.
    drain := exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                     and e.seq = p_seq + 1 and e.status in ('held', 'pending'));
  end if;

  perform set_config('lock_timeout', v_prev_lock_timeout, true);
  return next;
end
$fn$;

create or replace function ${t.fn('take_next')}(p_source text, p_key text, p_wait boolean, p_keep_payload boolean, p_lock_timeout text)
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
  select * into v_ev from ${t.events} e
    where e.source = p_source and e.key = p_key and e.seq = v_next and e.status in ('held', 'pending')
      and (e.run_after is null or e.run_after <= now())
    for update;
  if not found then return; end if;
  update ${t.keys} k set next_seq = v_next + 1, updated_at = now() where k.source = p_source and k.key = p_key;
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
  seq := v_ev.seq;
  more := exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                  and e.seq = v_next + 1 and e.status in ('held', 'pending'));
  return next;
end
$fn$;

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
end
$fn$;

create or replace function ${t.fn('take_turn')}(p_source text, p_key text, p_keep_payload boolean)
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
  seq := v_ev.seq;
  return next;
end
$fn$;

create or replace function ${t.fn('advance')}(p_source text, p_key text, p_seq bigint)
returns boolean
language plpgsql as $fn$
begin
  update ${t.keys} k set next_seq = p_seq + 1, updated_at = now()
   where k.source = p_source and k.key = p_key and k.next_seq = p_seq;
  if not found then
    -- The cursor moved under us (an operator skipped this seq): roll back, apply nothing.
    raise exception 'webhook-inbox: cursor of key moved during apply' using errcode = '40001';
  end if;
  return exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                 and e.seq = p_seq + 1 and e.status in ('held', 'pending'));
end
$fn$;

create or replace function ${t.fn('fail')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text, p_payload bytea, p_headers jsonb,
  p_error text, p_max_attempts integer, p_on_poison text, p_retry_in_ms bigint, p_received_at timestamptz
) returns table (decision text, attempts integer, drain boolean)
language plpgsql as $fn$
declare
  v_attempts integer;
begin
  drain := false;
  if p_key is not null then
    -- Lock order (ARCHITECTURE.md, "Locks"): the key row, then the event row, as the claim,
    -- take_next and the operator actions do. Updating the event first and the key after
    -- deadlocked against a sender's retry of the same event, whose claim held the key.
    insert into ${t.keys} as k (source, key, next_seq) values (p_source, p_key, p_seq)
      on conflict (source, key) do nothing;
    perform 1 from ${t.keys} k where k.source = p_source and k.key = p_key for update;
  end if;
  insert into ${t.events} as e (source, id, key, seq, body_hash, status, payload, headers, attempts, last_error,
                                run_after, received_at)
    values (p_source, p_id, p_key, p_seq, p_hash, 'pending', p_payload, p_headers, 1, p_error,
            now() + p_retry_in_ms * interval '1 millisecond', coalesce(p_received_at, now()))
    on conflict (source, id) do update
      set attempts = e.attempts + 1, last_error = excluded.last_error, run_after = excluded.run_after,
          payload = coalesce(e.payload, excluded.payload), headers = coalesce(e.headers, excluded.headers)
      where e.status in ('pending', 'held') and (excluded.body_hash = '' or e.body_hash = excluded.body_hash)
    returning e.attempts into v_attempts;
  if not found then
    -- Applied (or dead-lettered) meanwhile by another delivery: this failure no longer counts.
    decision := 'gone';
    return next;
    return;
  end if;
  attempts := v_attempts;
  if v_attempts < p_max_attempts then
    decision := 'failed';
    return next;
    return;
  end if;
  update ${t.events} e set status = 'dead', dead_reason = 'poison', run_after = null
    where e.source = p_source and e.id = p_id;
  decision := 'dead';
  if p_key is not null then
    if p_on_poison = 'block' then
      update ${t.keys} k set state = 'blocked', blocked_seq = p_seq, blocked_reason = 'poison', updated_at = now()
        where k.source = p_source and k.key = p_key and k.next_seq = p_seq;
    else
      insert into ${t.gaps} (source, key, from_seq, to_seq, reason) values (p_source, p_key, p_seq, p_seq, 'poison')
        on conflict do nothing;
      update ${t.keys} k set next_seq = p_seq + 1, updated_at = now()
        where k.source = p_source and k.key = p_key and k.next_seq = p_seq;
      drain := found;
    end if;
  end if;
  return next;
end
$fn$;

create or replace function ${t.fn('sweep')}(p_source text, p_gap_timeout_ms bigint, p_on_gap text, p_limit integer)
returns table (key text, action text, from_seq bigint, to_seq bigint)
language plpgsql as $fn$
declare
  r record;
  v_next bigint;
  v_first bigint;
  v_oldest timestamptz;
begin
  for r in
    -- Open keys only: blocked keys wait for an operator, and would otherwise fill the limit
    -- pass after pass and starve every other key.
    select e.key as k
      from ${t.events} e
      join ${t.keys} k on k.source = e.source and k.key = e.key and k.state = 'open'
     where e.source = p_source and e.status in ('held', 'pending') and e.key is not null
     group by e.key
     order by min(e.received_at)
     limit p_limit
  loop
    -- Skip keys someone is applying right now: they drain them.
    select k.next_seq into v_next from ${t.keys} k
      where k.source = p_source and k.key = r.k and k.state = 'open' for update skip locked;
    continue when not found;
    -- Read the buffer again under the key lock: the loop's snapshot is older, and a held
    -- event that arrived since (below the one it saw first) must not be skipped as a gap.
    select min(e.seq), min(e.received_at) into v_first, v_oldest from ${t.events} e
      where e.source = p_source and e.key = r.k and e.status in ('held', 'pending');
    continue when v_first is null;
    key := r.k;
    if v_first <= v_next then
      continue when not exists (
        select 1 from ${t.events} e where e.source = p_source and e.key = r.k and e.seq = v_next
           and e.status in ('held', 'pending') and (e.run_after is null or e.run_after <= now()));
      action := 'drain';
      from_seq := null;
      to_seq := null;
      return next;
    elsif v_oldest <= now() - p_gap_timeout_ms * interval '1 millisecond' then
      from_seq := v_next;
      to_seq := v_first - 1;
      if p_on_gap = 'skip' then
        insert into ${t.gaps} (source, key, from_seq, to_seq, reason) values (p_source, r.k, v_next, v_first - 1, 'timeout');
        update ${t.keys} k set next_seq = v_first, updated_at = now() where k.source = p_source and k.key = r.k;
        action := 'skipped';
      else
        update ${t.keys} k set state = 'blocked', blocked_seq = v_next, blocked_reason = 'gap', updated_at = now()
          where k.source = p_source and k.key = r.k;
        action := 'blocked';
      end if;
      return next;
    end if;
  end loop;
end
$fn$;

create or replace function ${t.fn('notify_pending')}() returns trigger
language plpgsql as $fn$
begin
  perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || new.source), coalesce(new.key, ''));
  return null;
end
$fn$;

create trigger ${t.local('events_notify_pending')} after insert on ${t.events}
  for each row when (new.status = 'pending' and new.run_after is null)
  execute function ${t.fn('notify_pending')}();
`;
}
