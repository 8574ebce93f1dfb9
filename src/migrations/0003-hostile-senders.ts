import type { Tables } from '../sql/tables.js';

/**
 * Migration 0003, hostile senders. Frozen history: never edit it.
 * - `claim`: a new id at a seq its key already applied is a mismatch (`seq-applied`, 422),
 *   no longer a silent "duplicate", while the applied row is kept (retention).
 * - an index that finds the applied row of a key's seq without scanning the table.
 * - `fail`: a 13th parameter, the dead letter's reason (`poison`, or `rejected` when the
 *   handler threw RejectEvent); the 12-parameter function is dropped first.
 */
export function hostileSenders(t: Tables): string {
  return `
create index ${t.local('events_applied_seq')} on ${t.events} (source, key, seq)
  where status = 'processed' and key is not null;

drop function ${t.fn('fail')}(text, text, text, bigint, text, bytea, jsonb, text, integer, text, bigint, timestamptz);
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
        elsif exists (select 1 from ${t.events} e where e.source = p_source and e.key = p_key
                      and e.seq = p_seq and e.status = 'processed') then
          -- Another id was applied at this seq (a sender that restarted its counter): refused
          -- and counted, never "duplicate" for an id this inbox never saw.
          decision := 'mismatch';
          reason := 'seq-applied';
        else
          -- Below the cursor, not skipped, and no row at this seq: applied before retention
          -- pruned its row. The cursor is the permanent dedup record of an ordered key; an id
          -- never seen cannot be told apart here (docs/ordering.md).
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
create or replace function ${t.fn('fail')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text, p_payload bytea, p_headers jsonb,
  p_error text, p_max_attempts integer, p_on_poison text, p_retry_in_ms bigint, p_received_at timestamptz,
  p_dead_reason text
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
  -- 'poison' after p_max_attempts; 'rejected' at once (the handler threw RejectEvent). The key
  -- follows onPoison either way; its block and gap reason stay 'poison' (an event it could not apply).
  update ${t.events} e set status = 'dead', dead_reason = p_dead_reason, run_after = null
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
`;
}
