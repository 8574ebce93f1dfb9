import type { Tables } from '../sql/tables.js';

/**
 * Migration 0002: everything 0.2.0 changes in a 0.1.0 database, in one step. It was built on
 * `main` as migrations 0003 to 0013, never released, and squashed here before the release
 * (a database migrated by one of those commits is refused: see `retiredMigrations` in
 * src/db/migrations.ts). What it does, in order:
 *
 * - Repairs what 0.1.0 could leave behind: rows waiting below their key's cursor, where nothing
 *   would apply them, are dead-lettered `late`; of two rows waiting at one key and seq, all but
 *   the first received are dead-lettered `seq-taken`; gaps recorded at or ahead of a cursor are
 *   removed.
 * - Indexes: the waiting index becomes unique (two events can no longer wait at one key and
 *   seq); `events_applied_seq` finds the applied row of a key's seq (a new id there is a
 *   mismatch); two partial indexes on ignored rows (by source and type: the operator's lists
 *   and replay; by `processed_at`: retention).
 * - Columns: `keys.last_version` (latest-wins ordering), `events.type` (written with a row's
 *   final state; what ignored events are listed and replayed by).
 * - The trigger `notify_pending` is dropped: the claim announces a pending event itself (the
 *   trigger's WHEN condition was prepared at every INSERT, also for every event applied inline).
 * - The CHECKs that list allowed values are written again with a constant array, which
 *   PostgreSQL stores folded (`x in ('a', 'b')` was folded again at every INSERT and UPDATE);
 *   `status` may be `ignored`. Each old one is found by its column (its name may have been
 *   truncated) and dropped; PostgreSQL names the new one as it named the old.
 * - Functions: the signatures 0.1.0 had and 0.2.0 changes are dropped, and every function is
 *   created as 0.2.0 ships it. The 13-parameter `claim` and the takes' 0.1.0 signatures stay,
 *   as wrappers with 0.1.0's behaviour, for 0.1.0 instances during a rolling deploy.
 *
 * Frozen history: never edit it. Today's functions live in src/db/sql/ (their text here is a copy
 * as of 0.2.0; test/sql-functions-match-migrations.test.ts binds the two). A later change to a
 * function is a new migration that states the function's whole new text.
 */
export function release0_2(t: Tables): string {
  return schemaChanges(t) + functions(t);
}

function schemaChanges(t: Tables): string {
  return `
update ${t.events} e set status = 'dead', dead_reason = 'late', run_after = null
  from ${t.keys} k
 where k.source = e.source and k.key = e.key and e.status in ('held', 'pending') and e.seq < k.next_seq;

update ${t.events} e set status = 'dead', dead_reason = 'seq-taken', run_after = null
  from (select source, id, row_number() over (partition by source, key, seq order by received_at, id) as n
          from ${t.events} where status in ('held', 'pending') and key is not null) d
 where d.source = e.source and d.id = e.id and d.n > 1;

delete from ${t.gaps} g using ${t.keys} k
 where k.source = g.source and k.key = g.key and g.from_seq >= k.next_seq;

create index ${t.local('events_applied_seq')} on ${t.events} (source, key, seq)
  where status = 'processed' and key is not null;

-- Qualified (t.fn qualifies any of our names): the index lives in the inbox's schema.
drop index ${t.fn('events_waiting')};
create unique index ${t.local('events_waiting')} on ${t.events} (source, key, seq) where status in ('held', 'pending');

alter table ${t.keys} add column last_version bigint;

drop trigger ${t.local('events_notify_pending')} on ${t.events};
drop function ${t.fn('notify_pending')}();
${foldedCheck(t.events, 'status', 'pending,held,processed,dead,ignored')}${foldedCheck(t.keys, 'state', 'open,blocked')}${foldedCheck(t.keys, 'blocked_reason', 'gap,poison')}${foldedCheck(t.gaps, 'reason', 'timeout,skip,poison')}
alter table ${t.events} add column type text;
create index ${t.local('events_ignored')} on ${t.events} (source, type, received_at) where status = 'ignored';
create index ${t.local('events_ignored_at')} on ${t.events} (processed_at) where status = 'ignored';

drop function ${t.fn('fail')}(text, text, text, bigint, text, bytea, jsonb, text, integer, text, bigint, timestamptz);
drop function ${t.fn('sweep')}(text, bigint, text, integer);
drop function ${t.fn('take_pending')}(text, boolean);
`;
}

/** The one-column CHECK of `column` dropped (found by its column) and added again, folded. */
function foldedCheck(table: string, column: string, values: string): string {
  // The table's name is quoted and qualified by createTables, from validated identifiers.
  return `
do $do$
declare v_name name;
begin
  select c.conname into strict v_name
    from pg_constraint c join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
   where c.conrelid = '${table}'::regclass and c.contype = 'c'
     and cardinality(c.conkey) = 1 and a.attname = '${column}';
  execute format('alter table %s drop constraint %I', '${table}', v_name);
end
$do$;
alter table ${table} add check (${column} = any ('{${values}}'::text[]));
`;
}

// Every function as 0.2.0 ships it (each wrapper after the function it calls).
function functions(t: Tables): string {
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
                      and e.seq = p_seq and e.status in ('processed', 'ignored')) then
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
          -- with its key, seq and result (src/db/sql/record-applied.ts). The key row locked above
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
          perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || p_source), p_key);
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
      -- (src/db/sql/record-applied.ts). Every other claim of the id waits for the lock until then
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
        if not p_apply then
          perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || p_source), '');
        end if;
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
    elsif v_ev.status in ('processed', 'ignored') then
      -- Ignored (no handler took its type) is as final as processed: a redelivery is a
      -- duplicate, told apart by its reason, never applied by this claim.
      decision := 'duplicate';
      result := v_ev.result;
      reason := nullif(v_ev.status, 'processed');
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
  -- this one's. Then the row, never waiting for an ordered one (src/db/sql/id-lock.ts says why).
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
    elsif v_ev.status in ('processed', 'ignored') then
      -- Ignored (no handler took its type) is as final as processed: a redelivery is a
      -- duplicate, told apart by its reason, never applied by this claim.
      decision := 'duplicate';
      result := v_ev.result;
      reason := nullif(v_ev.status, 'processed');
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

create or replace function ${t.fn('take_next')}(p_source text, p_key text, p_wait boolean, p_keep_payload boolean, p_lock_timeout text)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz, more boolean)
language sql as $fn$
  select * from ${t.fn('take_next')}(p_source, p_key, p_wait, p_keep_payload, p_lock_timeout, false)
$fn$;

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

create or replace function ${t.fn('take_pending')}(p_source text, p_keep_payload boolean, p_limit integer default 1)
returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language sql as $fn$
  select * from ${t.fn('take_pending')}(p_source, p_keep_payload, p_limit, false)
$fn$;

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

create or replace function ${t.fn('take_turn')}(p_source text, p_key text, p_keep_payload boolean)
returns table (id text, seq bigint, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz)
language sql as $fn$
  select * from ${t.fn('take_turn')}(p_source, p_key, p_keep_payload, false)
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
      -- A gap is recorded only when the cursor moves past it: one recorded ahead of the cursor
      -- would make the key's later gap timeouts collide with it.
      update ${t.keys} k set next_seq = p_seq + 1, updated_at = now()
        where k.source = p_source and k.key = p_key and k.next_seq = p_seq;
      drain := found;
      if drain then
        insert into ${t.gaps} (source, key, from_seq, to_seq, reason) values (p_source, p_key, p_seq, p_seq, 'poison')
          on conflict do nothing;
      end if;
    end if;
  end if;
  return next;
end
$fn$;

create or replace function ${t.fn('sweep')}(p_source text, p_gap_timeout_ms bigint, p_on_gap text, p_limit integer)
returns table (key text, action text, from_seq bigint, to_seq bigint, error text)
language plpgsql as $fn$
declare
  r record;
  v_next bigint;
  v_first bigint;
  v_oldest timestamptz;
  v_action text;
  v_from bigint;
  v_to bigint;
begin
  for r in
    -- Open keys only: blocked keys wait for an operator.
    select e.key as k
      from ${t.events} e
      join ${t.keys} k on k.source = e.source and k.key = e.key and k.state = 'open'
     where e.source = p_source and e.status in ('held', 'pending') and e.key is not null
       and e.seq >= k.next_seq
     group by e.key
    having bool_or(e.seq = k.next_seq and (e.run_after is null or e.run_after <= now()))
        or (not bool_or(e.seq = k.next_seq)
            and min(e.received_at) <= now() - p_gap_timeout_ms * interval '1 millisecond')
     order by min(e.received_at)
     limit p_limit
  loop
    v_action := null;
    begin
      -- Skip keys someone is applying right now: they drain them.
      select k.next_seq into v_next from ${t.keys} k
        where k.source = p_source and k.key = r.k and k.state = 'open' for update skip locked;
      if found then
        -- Read the buffer again under the key lock: the loop's snapshot is older, and a held
        -- event that arrived since (below the one it saw first) must not be skipped as a gap.
        select min(e.seq), min(e.received_at) into v_first, v_oldest from ${t.events} e
          where e.source = p_source and e.key = r.k and e.status in ('held', 'pending') and e.seq >= v_next;
        if v_first is null then
          null;
        elsif v_first = v_next then
          if exists (
            select 1 from ${t.events} e where e.source = p_source and e.key = r.k and e.seq = v_next
               and e.status in ('held', 'pending') and (e.run_after is null or e.run_after <= now())) then
            v_action := 'drain';
            v_from := null;
            v_to := null;
          end if;
        elsif v_oldest <= now() - p_gap_timeout_ms * interval '1 millisecond' then
          v_from := v_next;
          v_to := v_first - 1;
          if p_on_gap = 'skip' then
            insert into ${t.gaps} as g (source, key, from_seq, to_seq, reason)
              values (p_source, r.k, v_next, v_first - 1, 'timeout')
              on conflict on constraint ${t.local('gaps_pkey')} do update set to_seq = greatest(g.to_seq, excluded.to_seq);
            update ${t.keys} k set next_seq = v_first, updated_at = now() where k.source = p_source and k.key = r.k;
            v_action := 'skipped';
          else
            update ${t.keys} k set state = 'blocked', blocked_seq = v_next, blocked_reason = 'gap', updated_at = now()
              where k.source = p_source and k.key = r.k;
            v_action := 'blocked';
          end if;
        end if;
      end if;
    exception when others then
      -- One bad key must not stop the pass (and so every other key's gap timeout and retry).
      key := r.k;
      action := 'error';
      from_seq := null;
      to_seq := null;
      error := sqlstate || ': ' || sqlerrm;
      return next;
      continue;
    end;
    continue when v_action is null;
    key := r.k;
    action := v_action;
    from_seq := v_from;
    to_seq := v_to;
    error := null;
    return next;
  end loop;
end
$fn$;
`;
}
