import { fromJsonText, toBoolean, toDate, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { readIdRow, takeIdLock } from './id-lock.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * `claim`: every decision about a delivery, in the transaction that runs its handler. Lock order: key row,
 * id lock, event rows (ARCHITECTURE.md). Deferred mode never locks the event row a worker may hold.
 */
export function claimFunction(t: Tables): string {
  return `
create or replace function ${t.fn('claim')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text,
  p_payload bytea, p_headers jsonb, p_apply boolean, p_keep_payload boolean,
  p_first_seen boolean, p_max_held integer, p_max_ahead bigint, p_lock_timeout text, p_type text,
  p_group text default ''
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
  v_stream text := ${stream('p_key', 'p_id')};
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
      from ${t.keys} k where k.source = p_source and k.stream = v_stream and k.key = p_key for update;
    if not found then
      insert into ${t.keys} as k (source, key, next_seq, stream)
        values (p_source, p_key, case when p_first_seen then p_seq else 1 end, v_stream)
        on conflict (source, key, stream) do nothing;
      v_created := found;
      select k.next_seq, k.state, k.blocked_reason, k.blocked_seq into v_next, v_state, v_blocked_reason, v_blocked_seq
        from ${t.keys} k where k.source = p_source and k.stream = v_stream and k.key = p_key for update;
    end if;
    expected := v_next;
    v_turn := p_seq = v_next and (v_state = 'open' or v_blocked_reason = 'gap');

    -- The id's lock, after the key row: a claim of the id under another key, under none, or
    -- latest-wins waits here until this one commits, and then reads its row (a mismatch),
    -- instead of running its handler beside this one's. No cycle: whoever holds an id's lock
    -- never waits for a key row afterwards, nor for an event row whose holder may (ARCHITECTURE.md,
    -- "Locks"); drains take key then event row and never this lock.
    ${takeIdLock(t)}

    -- Holding the key, never wait for an event row (ARCHITECTURE.md, "Locks"): the only holder
    -- of an ordered event row without its key is a worker between take_turn and advance, which
    -- is applying it and waits for this key in advance. Such a row is answered from its
    -- committed status and never applied here.
    -- Deferred mode applies nothing here: the row is only read, as committed, never locked.
    if p_apply then
      select * into v_ev from ${t.events} e
       where e.source = p_source and e.stream = v_stream and e.id = p_id for update skip locked;
      v_found := found;
    end if;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      v_busy := v_found;
    end if;
    if not v_found then
      if p_seq < v_next then
        -- A key's gaps never overlap (each is recorded from the cursor, which then moves past
        -- it), so the last one starting at or below the seq is the only one that can hold it:
        -- one index read, where a range test (between from_seq and to_seq) read every gap
        -- below the seq, under the key's lock (a stream's gaps grow by one per timeout).
        if coalesce((select g.to_seq >= p_seq from ${t.gaps} g
                      where g.source = p_source and g.stream = v_stream and g.key = p_key and g.from_seq <= p_seq
                      order by g.from_seq desc limit 1), false) then
          -- Late: its seq was skipped by a gap timeout. Applying it now would break the order.
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, dead_reason, type, stream, group_key)
            values (p_source, p_id, p_key, p_seq, p_hash, 'dead', p_payload, p_headers, 'late', p_type, v_stream, coalesce(p_group, ''));
          decision := 'dead';
          reason := 'late';
        elsif exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
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
      elsif exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
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
        if p_apply then
          -- Applied now, in its turn: no row until COMMIT, where the apply path inserts it once,
          -- with its key, seq and result (src/db/sql/record-applied.ts). The key row locked above
          -- (held until COMMIT) already serialises every claim, drain and operator action of
          -- this key, and the cursor still moves below, so none of them can see the seq's turn
          -- without its row. A claim of the id under no key or another key does not take it and
          -- may apply the id meanwhile: the primary key then fails one of the two INSERTs at
          -- COMMIT (23505 -> 409), and nothing is applied twice.
          decision := 'apply';
          row_at_commit := true;
        else
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, type, stream, group_key)
            values (p_source, p_id, p_key, p_seq, p_hash, 'pending', p_payload, p_headers, p_type, v_stream, coalesce(p_group, ''));
          decision := 'pending';
          if v_state = 'blocked' then
            -- The missing seq of a gap-blocked key arrived: the key is open again for the worker
            -- that applies it, as applying it inline reopens it.
            update ${t.keys} k set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
              where k.source = p_source and k.stream = v_stream and k.key = p_key;
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
        -- buffer and every claim of the key waits behind it. ORDER BY ... LIMIT 1 rather than
        -- max(): on a table ANALYZE has not seen yet (a new deployment's first minute), the
        -- planner makes max() an aggregate over every waiting row of the key, so each claim would
        -- read the whole buffer under the key's lock.
        select e.seq into v_top from ${t.events} e
          where e.source = p_source and e.stream = v_stream and e.key = p_key and e.status in ('held', 'pending')
          order by e.seq desc limit 1;
        v_held := 0;
        if greatest(v_top, p_seq) - v_next + 1 >= p_max_held then
          select count(*) into v_held from ${t.events} e
            where e.source = p_source and e.stream = v_stream and e.key = p_key and e.status in ('held', 'pending');
        end if;
        if v_held >= p_max_held then
          decision := 'buffer-full';
          reason := 'held-per-key';
        else
          insert into ${t.events} (source, id, key, seq, body_hash, status, payload, headers, type, stream, group_key)
            values (p_source, p_id, p_key, p_seq, p_hash, 'held', p_payload, p_headers, p_type, v_stream, coalesce(p_group, ''));
          decision := 'held';
        end if;
      end if;
    end if;
  else
    -- Unordered: the id's lock first, holding nothing else (so a wait for it closes no cycle),
    -- in every mode: an inline claim and a deferred one (mixed deployments, a switch between
    -- modes) then never both let a handler run for the id.
    ${takeIdLock(t)}
    if p_apply then
      -- Applied now: the row is inserted only at COMMIT, with its result
      -- (src/db/sql/record-applied.ts). Every other claim of the id waits for the lock until then
      -- and reads the committed row: a duplicate (or a mismatch). The primary key stays the
      -- last guard: a row inserted meanwhile fails this transaction's INSERT at COMMIT
      -- (23505 -> 409), and nothing is applied twice.
      ${readIdRow(t)}
      if not v_found then
        decision := 'apply';
        row_at_commit := true;
      end if;
    else
      -- Deferred mode: the row as committed, never locked. A worker applying it holds its lock
      -- (and, in a batch, may have updated it already): waiting for that lock, or inserting
      -- over the row (ON CONFLICT waits for a conflicting row's updater), would make the
      -- redelivery wait for the worker's whole transaction. Under the id's lock, no row means none is
      -- being inserted either (every transaction that inserts an id's row holds its lock), so
      -- the INSERT below waits for no one.
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if not v_found then
        insert into ${t.events} as e (source, id, body_hash, status, payload, headers, type, stream, group_key)
          values (p_source, p_id, p_hash, 'pending', p_payload, p_headers, p_type, v_stream, coalesce(p_group, ''))
          on conflict (source, id, stream) do nothing;
        if not found then
          -- Written by a transaction that took no id lock (an operator's, an application's own).
          raise exception 'event row written during claim' using errcode = '55P03';
        end if;
        decision := 'pending';
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
        where e.source = p_source and e.stream = v_ev.stream and e.id = p_id;
      decision := 'apply';
    else
      decision := v_ev.status;  -- 'held' or 'pending': it stays buffered (or a worker applies it now)
    end if;
  end if;

  if v_created and decision in ('mismatch', 'buffer-full') then
    -- A refused delivery leaves nothing behind, not even a cursor (it would fix the first seq
    -- of the key under firstSeq 'first-seen').
    delete from ${t.keys} k where k.source = p_source and k.stream = v_stream and k.key = p_key;
  end if;

  if decision = 'apply' and p_key is not null then
    update ${t.keys} k set next_seq = p_seq + 1, state = 'open', blocked_seq = null, blocked_reason = null,
           updated_at = now()
      where k.source = p_source and k.stream = v_stream and k.key = p_key;
    -- Tells the caller whether to drain after its response, saving a query when there is nothing.
    drain := exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
                     and e.seq = p_seq + 1 and e.status in ('held', 'pending'));
  end if;

  perform set_config('lock_timeout', v_prev_lock_timeout, true);
  return next;
end
$fn$;
`;
}

export type ClaimDecision = 'apply' | 'pending' | 'held' | 'duplicate' | 'dead' | 'mismatch' | 'buffer-full';

export interface ClaimArgs {
  source: string;
  id: string;
  key: string | null;
  seq: number | null;
  hash: string;
  /** Stored only where the event may be applied later (held, pending, late). */
  payload: Buffer | null;
  headers: Record<string, string> | null;
  /** The handler runs now, in this transaction; else the event is stored pending for a worker. */
  apply: boolean;
  keepPayload: boolean;
  firstSeen: boolean;
  maxHeld: number;
  maxAhead: number;
  lockTimeout: string;
  type: string | null;
  group?: string | null;
}

export interface ClaimRow {
  decision: ClaimDecision;
  result: unknown;
  expected: number | null;
  reason: string | null;
  attempts: number;
  drain: boolean;
  receivedAt: Date;
  /** 'apply' of a new event: its row is inserted at COMMIT with its result (`recordApplied`). */
  rowAtCommit: boolean;
}

export interface ClaimResult {
  decision: ClaimDecision;
  /** jsonb read back as text. */
  result: string | null;
  expected: unknown;
  reason: string | null;
  attempts: unknown;
  drain: unknown;
  received_at: unknown;
  row_at_commit?: unknown;
}

export function toClaimRow(row: ClaimResult): ClaimRow {
  return {
    decision: row.decision,
    result: fromJsonText(row.result),
    expected: toNumber(row.expected),
    reason: row.reason,
    attempts: toNumber(row.attempts) ?? 0,
    drain: toBoolean(row.drain),
    receivedAt: toDate(row.received_at),
    rowAtCommit: toBoolean(row.row_at_commit ?? false),
  };
}

/** One round trip: the whole decision for a delivery (after the try-claim, when it cannot decide). */
export function createClaim(names: StatementNames, t: Tables) {
  const statement = defineStatement<ClaimResult>(
    names,
    t,
    'claim',
    `select decision, result::text as result, expected, reason, attempts, drain, received_at, row_at_commit
       from ${t.fn('claim')}($1, $2, $3, $4::bigint, $5, $6, $7::jsonb, $8, $9, $10, $11, $12::bigint, $13, $14, $15)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function claim(db: Queryable, a: ClaimArgs): Promise<ClaimRow> {
    const [row] = await statement.run(db, [
      a.source,
      a.id,
      a.key,
      a.seq,
      a.hash,
      a.payload,
      a.headers === null ? null : JSON.stringify(a.headers),
      a.apply,
      a.keepPayload,
      a.firstSeen,
      a.maxHeld,
      a.maxAhead,
      a.lockTimeout,
      a.type,
      a.group ?? '',
    ]);
    return toClaimRow(row);
  };
}
