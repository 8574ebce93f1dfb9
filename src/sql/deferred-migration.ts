import { createHash } from 'node:crypto';
import type { Tables } from './tables.js';

/**
 * The LISTEN/NOTIFY channel of one inbox (tables + source). Named after the schema, the table
 * prefix and the source, hashed so that it is always a valid identifier of 35 characters
 * (channel names are truncated at 63 bytes, and sources may hold any printable ASCII).
 * The trigger of migration 0003 computes the same name in SQL.
 */
export function notifyChannel(t: Tables, source: string): string {
  return `wi_${createHash('md5').update(`${t.schema}.${t.prefix}|${source}`).digest('hex')}`;
}

/** Migration 0003: the worker's queue of unordered pending events, its wake-up, and a fix to `fail`. */
export function deferredMigration(t: Tables): string {
  // Schema and prefix are validated identifiers (options.ts), safe inside a string literal.
  const channelPrefix = `${t.schema}.${t.prefix}|`;
  return `
-- Unordered pending events, in the order they become due: a new event is due when received,
-- a failed one at run_after. The worker takes the first due one with SKIP LOCKED.
create index ${t.local('events_pending_due')} on ${t.events} (source, (coalesce(run_after, received_at)))
  where status = 'pending' and key is null;

-- take_pending: takes one due, unordered, pending event that no one else holds, marks it
-- processed and returns it (with the payload it had), so that the caller runs the handler in
-- the same transaction: handler and status change commit together, or neither does. Ordered
-- events are taken by take_next, at their key's cursor.
create function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean)
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

-- take_turn and advance: how workers apply an ordered key's next event (held or pending) in
-- deferred mode. The same cursor and the same rule as take_next (only the event at next_seq
-- runs), but the key row is not locked for the handler's duration: the event row's lock
-- (SKIP LOCKED) is what keeps two workers apart, and the cursor moves at the end (advance), so
-- the key's lock is held only from there to COMMIT. Deferred claims of the key's other seqs
-- lock the key row to decide held or pending; with take_next they would wait for the running
-- handler, and a slow handler would again delay the acknowledgement past the sender's timeout.
create function ${t.fn('take_turn')}(p_source text, p_key text, p_keep_payload boolean)
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
  seq := v_ev.seq;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;
  return next;
end
$fn$;

-- advance: after the handler, in its transaction: moves the cursor past p_seq and tells
-- whether the next seq already waits. It takes the key's lock, so every claim that decided
-- "held" against the old cursor has committed and is seen here: no wake-up is lost.
create function ${t.fn('advance')}(p_source text, p_key text, p_seq bigint)
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

-- Wakes the workers of every instance when a runnable pending event is stored: NOTIFY is sent
-- at COMMIT, inside the claim's own statement, so it costs the delivery no round trip. The
-- payload is the ordering key ('' for an unordered event; keys are never empty). Failed
-- events (run_after set) are not announced: they are not due yet.
create function ${t.fn('notify_pending')}() returns trigger
language plpgsql as $fn$
begin
  perform pg_notify('wi_' || md5('${channelPrefix}' || new.source), coalesce(new.key, ''));
  return null;
end
$fn$;
create trigger ${t.local('events_notify_pending')} after insert on ${t.events}
  for each row when (new.status = 'pending' and new.run_after is null)
  execute function ${t.fn('notify_pending')}();

-- fail, fixed: drains and workers pass an empty hash (they took the stored row, so there is
-- nothing to compare), and 0002 then never counted their failures: a poison event was retried
-- at once, forever. An empty hash now means "the stored event".
create or replace function ${t.fn('fail')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text, p_payload bytea, p_headers jsonb,
  p_error text, p_max_attempts integer, p_on_poison text, p_retry_in_ms bigint, p_received_at timestamptz
) returns table (decision text, attempts integer, drain boolean)
language plpgsql as $fn$
declare
  v_attempts integer;
begin
  drain := false;
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
`;
}
