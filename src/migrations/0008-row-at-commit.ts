import type { Tables } from '../sql/tables.js';

/**
 * Migration 0008: a new event applied inline (unordered, or ordered in its turn) is written
 * once, at COMMIT, with its result, instead of inserted by the claim and updated at COMMIT;
 * and every claim takes the id's advisory lock before it reads or writes the id's row.
 * - `claim` gets a 14th parameter, `p_row_at_commit`, and an output column `row_at_commit`:
 *   with it, an `apply` writes no event row (the caller's `record_applied` inserts it riding
 *   on COMMIT); the ordered claim still moves the key's cursor under the key row's lock.
 * - Every claim takes `pg_advisory_xact_lock` on a hash of the inbox's scope, the
 *   length-prefixed source and the id: an unordered claim first, holding nothing; an ordered
 *   claim (and `claim_latest`) after its key row. A handler then never runs for an id while
 *   another claim of that id is in flight, whatever its key, mode or policy. Holding that lock,
 *   a claim waits for no ordered event row (its holder may be a worker waiting for its key).
 * - The 13-parameter `claim` becomes a wrapper calling the new one with `false` (the row
 *   written by the claim, as before), so that instances of earlier versions claim correctly
 *   during a rolling deploy.
 * One migration for what was built in three steps before any release (so no database needs
 * the steps). Frozen history: never edit it; today's functions live in src/sql/claim.ts,
 * src/sql/claim-latest.ts and src/sql/id-lock.ts.
 */
export function rowAtCommit(t: Tables): string {
  return claim(t) + previousClaim(t) + claimLatest(t);
}

// The claim as of this migration (a copy, frozen: src/sql/claim.ts moves on). Migration 0012
// creates it again with two statements added.
export function claim(t: Tables): string {
  return `
create or replace function ${t.fn('claim')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text,
  p_payload bytea, p_headers jsonb, p_apply boolean, p_keep_payload boolean,
  p_first_seen boolean, p_max_held integer, p_max_ahead bigint, p_lock_timeout text,
  p_row_at_commit boolean
) returns table (decision text, result jsonb, expected bigint, reason text, attempts integer, drain boolean,
                 received_at timestamptz, row_at_commit boolean)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_next bigint;
  v_state text;
  v_blocked_reason text;
  v_blocked_seq bigint;
  v_ev ${t.events}%rowtype;
  v_found boolean := false;
  v_created boolean := false;
  v_turn boolean;
  v_busy boolean := false;
  v_held integer;
  v_top bigint;
begin
  -- Bounds the wait for a concurrent delivery of the same id or key (-> 409 in-flight);
  -- restored below so that the handler's own statements are not affected.
  perform set_config('lock_timeout', p_lock_timeout, true);
  drain := false;
  attempts := 0;
  received_at := now();
  row_at_commit := false;

  if p_key is not null then
    -- The key row is the key's lock: one event of a key is applied at a time, and the cursor
    -- moves only under it. It is locked before any event row; drains lock in the same order.
    select k.next_seq, k.state, k.blocked_reason, k.blocked_seq into v_next, v_state, v_blocked_reason, v_blocked_seq
      from ${t.keys} k where k.source = p_source and k.key = p_key for update;
    if not found then
      insert into ${t.keys} as k (source, key, next_seq)
        values (p_source, p_key, case when p_first_seen then p_seq else 1 end)
        on conflict (source, key) do nothing;
      v_created := found;
      select k.next_seq, k.state, k.blocked_reason, k.blocked_seq into v_next, v_state, v_blocked_reason, v_blocked_seq
        from ${t.keys} k where k.source = p_source and k.key = p_key for update;
    end if;
    expected := v_next;
    v_turn := p_seq = v_next and (v_state = 'open' or v_blocked_reason = 'gap');

    -- The id's lock, after the key row: a claim of the id under another key, under none, or
    -- latest-wins waits here until this one commits, and then reads its row (a mismatch),
    -- instead of running its handler beside this one's. No cycle: whoever holds an id's lock
    -- never waits for a key row afterwards, nor for an event row whose holder may (ARCHITECTURE.md,
    -- "Locks"); drains take key then event row and never this lock.
    perform pg_advisory_xact_lock(hashtextextended(
      '${t.schema}.${t.prefix}|' || length(p_source) || '|' || p_source || '|' || p_id, 0));

    -- Holding the key, never wait for an event row (ARCHITECTURE.md, "Locks"): the only holder
    -- of an ordered event row without its key is a worker between take_turn and advance, which
    -- is applying it and waits for this key in advance. Such a row is answered from its
    -- committed status and never applied here.
    select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      v_busy := v_found;
    end if;
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
      elsif v_state = 'blocked' and v_blocked_reason = 'poison' and p_seq = v_blocked_seq then
        -- The dead event that blocks the key holds this seq: a second id here would wait beside
        -- it, and a replay of the dead one would leave two events at one seq.
        decision := 'mismatch';
        reason := 'seq-taken';
      elsif v_turn then
        if p_apply and p_row_at_commit then
          -- Applied now, in its turn: no row until COMMIT, where the apply path inserts it once,
          -- with its key, seq and result (src/sql/record-applied.ts). The key row locked above
          -- (held until COMMIT) already serialises every claim, drain and operator action of
          -- this key, and the cursor still moves below, so none of them can see the seq's turn
          -- without its row. A claim of the id under no key or another key does not take it and
          -- may apply the id meanwhile: the primary key then fails one of the two INSERTs at
          -- COMMIT (23505 -> 409), and nothing is applied twice.
          decision := 'apply';
          row_at_commit := true;
        elsif p_apply then
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, processed_at)
            values (p_source, p_id, p_key, p_seq, p_hash, 'processed',
                    case when p_keep_payload then p_payload end, case when p_keep_payload then p_headers end, now());
          decision := 'apply';
        else
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers)
            values (p_source, p_id, p_key, p_seq, p_hash, 'pending', p_payload, p_headers);
          decision := 'pending';
          if v_state = 'blocked' then
            -- The missing seq of a gap-blocked key arrived: the key is open again for the worker
            -- that applies it, as applying it inline reopens it.
            update ${t.keys} k set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
              where k.source = p_source and k.key = p_key;
          end if;
        end if;
      elsif p_seq - v_next > p_max_ahead then
        decision := 'buffer-full';
        reason := 'seq-ahead';
      else
        -- Waiting events of a key have distinct seqs at or above its cursor (the unique
        -- waiting index; no event stranded below its cursor), so there are at most
        -- (highest waiting seq - cursor + 1) of them: one index read. They are counted only
        -- when that bound reaches the limit, as a count under the key's lock grows with the
        -- buffer and every claim of the key waits behind it.
        select max(e.seq) into v_top from ${t.events} e
          where e.source = p_source and e.key = p_key and e.status in ('held', 'pending');
        v_held := 0;
        if greatest(v_top, p_seq) - v_next + 1 >= p_max_held then
          select count(*) into v_held from ${t.events} e
            where e.source = p_source and e.key = p_key and e.status in ('held', 'pending');
        end if;
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
    -- Unordered: the id's lock first, holding nothing else (so a wait for it closes no cycle),
    -- in every mode: an inline claim and a deferred one (mixed deployments, a switch between
    -- modes) then never both let a handler run for the id.
    perform pg_advisory_xact_lock(hashtextextended(
      '${t.schema}.${t.prefix}|' || length(p_source) || '|' || p_source || '|' || p_id, 0));
    if p_apply and p_row_at_commit then
      -- Applied now: the row is inserted only at COMMIT, with its result
      -- (src/sql/record-applied.ts). Every other claim of the id waits for the lock until then
      -- and reads the committed row: a duplicate (or a mismatch). The primary key stays the
      -- last guard: a row inserted meanwhile fails this transaction's INSERT at COMMIT
      -- (23505 -> 409), and nothing is applied twice.
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if v_found and v_ev.key is null then
        select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
        v_found := found;
      end if;
    end if;
      if not v_found then
        decision := 'apply';
        row_at_commit := true;
      end if;
    else
      -- Deferred mode (stored as pending), and an inline claim through the 13-parameter claim of
      -- earlier versions: the row is inserted now.
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
        -- The id exists (committed: every claim that inserts it holds the lock this one took).
        select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if v_found and v_ev.key is null then
        select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
        v_found := found;
      end if;
    end if;
        if not v_found then
          raise exception 'event row pruned during claim' using errcode = '55P03';
        end if;
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
    elsif p_apply and (p_key is null or v_turn) and not v_busy then
      -- Waiting (an earlier run failed, or a drain has not reached it yet) and its turn has
      -- come: this delivery applies it.
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null,
             payload = case when p_keep_payload then e.payload end,
             headers = case when p_keep_payload then e.headers end
        where e.source = p_source and e.id = p_id;
      decision := 'apply';
    else
      decision := v_ev.status;  -- 'held' or 'pending': it stays buffered (or a worker applies it now)
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
`;
}

// The 13-parameter claim of earlier versions, as of this migration.
function previousClaim(t: Tables): string {
  return `
create or replace function ${t.fn('claim')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text,
  p_payload bytea, p_headers jsonb, p_apply boolean, p_keep_payload boolean,
  p_first_seen boolean, p_max_held integer, p_max_ahead bigint, p_lock_timeout text
) returns table (decision text, result jsonb, expected bigint, reason text, attempts integer, drain boolean, received_at timestamptz)
language sql as $fn$
  select c.decision, c.result, c.expected, c.reason, c.attempts, c.drain, c.received_at
    from ${t.fn('claim')}(p_source, p_id, p_key, p_seq, p_hash, p_payload, p_headers, p_apply, p_keep_payload,
                          p_first_seen, p_max_held, p_max_ahead, p_lock_timeout, false) c
$fn$;
`;
}

// claim_latest as of this migration (a copy, frozen: src/sql/claim-latest.ts moves on).
function claimLatest(t: Tables): string {
  return `
create or replace function ${t.fn('claim_latest')}(
  p_source text, p_id text, p_key text, p_version bigint, p_hash text, p_lock_timeout text
) returns table (decision text, result jsonb, latest bigint, reason text, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_last bigint;
  v_ev ${t.events}%rowtype;
  v_superseded jsonb;
  v_found boolean;
begin
  perform set_config('lock_timeout', p_lock_timeout, true);
  attempts := 0;
  received_at := now();
  select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.key = p_key for update;
  if not found then
    insert into ${t.keys} as k (source, key, next_seq) values (p_source, p_key, 1)
      on conflict (source, key) do nothing;
    select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.key = p_key for update;
  end if;
  latest := v_last;
  v_superseded := jsonb_build_object('superseded', true, 'key', p_key, 'version', p_version, 'latest', v_last);

  -- The id's lock, after the key row: an ordered, unordered or deferred claim of the same id
  -- waits until this one commits (and reads its row) rather than running its handler beside
  -- this one's. Then the row, never waiting for an ordered one (src/sql/id-lock.ts says why).
  perform pg_advisory_xact_lock(hashtextextended(
      '${t.schema}.${t.prefix}|' || length(p_source) || '|' || p_source || '|' || p_id, 0));
  select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if v_found and v_ev.key is null then
        select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
        v_found := found;
      end if;
    end if;
  if not v_found then
    if v_last is not null and p_version < v_last then
      insert into ${t.events} (source, id, body_hash, status, result, processed_at)
        values (p_source, p_id, p_hash, 'processed', v_superseded, now());
      decision := 'superseded';
      result := v_superseded;
    else
      insert into ${t.events} (source, id, body_hash, status, processed_at)
        values (p_source, p_id, p_hash, 'processed', now());
      decision := 'apply';
    end if;
  else
    attempts := v_ev.attempts;
    received_at := v_ev.received_at;
    if v_ev.body_hash <> p_hash then
      decision := 'mismatch';
      reason := 'body';
    elsif v_ev.key is not null then
      decision := 'mismatch';
      reason := 'key';
    elsif v_ev.status = 'processed' then
      decision := 'duplicate';
      result := v_ev.result;
    elsif v_ev.status = 'dead' then
      decision := 'dead';
      reason := v_ev.dead_reason;
    elsif v_last is not null and p_version < v_last then
      -- It waited after a failed run, and a newer version was applied meanwhile.
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null, result = v_superseded
        where e.source = p_source and e.id = p_id;
      decision := 'superseded';
      result := v_superseded;
    else
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null
        where e.source = p_source and e.id = p_id;
      decision := 'apply';
    end if;
  end if;

  if decision = 'apply' then
    update ${t.keys} k set last_version = p_version, updated_at = now()
      where k.source = p_source and k.key = p_key;
  end if;
  perform set_config('lock_timeout', v_prev_lock_timeout, true);
  return next;
end
$fn$;
`;
}
