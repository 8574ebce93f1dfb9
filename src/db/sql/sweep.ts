import { toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * `sweep`: one step of the walk over waiting keys (a loose index scan from after `p_after`), returning
 * the keys to drain and those whose gap timed out; it stops at `p_limit` keys with work or `p_scan`
 * examined, and a last 'resume' row says where to go on. A key with work is locked (skipped if held) and
 * read again; an error is that key's `error` row. Run READ COMMITTED.
 */
export function sweepFunction(t: Tables): string {
  return `
create or replace function ${t.fn('sweep')}(p_source text, p_gap_timeout_ms bigint, p_on_gap text, p_limit integer,
                                             p_after text, p_scan integer)
returns table (key text, action text, from_seq bigint, to_seq bigint, error text)
language plpgsql as $fn$
declare
  v_key text := p_after;
  v_cutoff timestamptz := now() - p_gap_timeout_ms * interval '1 millisecond';
  v_second_lap boolean := false;
  v_scanned integer := 0;
  v_chosen integer := 0;
  v_next bigint;
  v_first bigint;
  v_due boolean;
  v_old boolean;
  v_action text;
  v_from bigint;
  v_to bigint;
  v_stream text;
begin
  loop
    -- The next key with a waiting event: one entry of events_waiting (source, key, seq). Two
    -- statements, not one with "v_key is null or e.key > v_key": under that OR the index's range is
    -- not bounded by the previous key, and each read scans from the first.
    if v_key is null then
      select e.key into v_key from ${t.events} e
       where e.source = p_source and e.status in ('held', 'pending') and e.key is not null
       order by e.key limit 1;
    else
      select e.key into v_key from ${t.events} e
       where e.source = p_source and e.status in ('held', 'pending') and e.key > v_key
       order by e.key limit 1;
    end if;
    if not found then
      -- Past the last key: round to the first, up to where the step began.
      exit when p_after is null or v_second_lap;
      v_second_lap := true;
      v_key := null;
      continue;
    end if;
    exit when v_second_lap and v_key > p_after;
    v_scanned := v_scanned + 1;
    v_stream := ${stream('v_key')};
    v_action := null;
    error := null;
    -- Open keys only (blocked keys wait for an operator); nothing locked yet.
    select k.next_seq into v_next from ${t.keys} k
     where k.source = p_source and k.stream = v_stream and k.key = v_key and k.state = 'open';
    if found then
      -- The first waiting seq at or past the cursor. ORDER BY ... LIMIT 1, not min(): one index
      -- read whatever the planner knows of the table (src/db/sql/claim.ts says why).
      select e.seq, (e.run_after is null or e.run_after <= now()), e.received_at <= v_cutoff
        into v_first, v_due, v_old from ${t.events} e
       where e.source = p_source and e.stream = v_stream and e.key = v_key and e.status in ('held', 'pending') and e.seq >= v_next
       order by e.seq limit 1;
      -- A gap is due once an event behind it has waited the gap timeout: the first one, or any
      -- other (read only when the first is younger, so a young gap reads its key's buffer).
      if found and ((v_first = v_next and v_due) or (v_first > v_next and (v_old or exists (
            select 1 from ${t.events} e
             where e.source = p_source and e.stream = v_stream and e.key = v_key and e.status in ('held', 'pending')
               and e.seq > v_next and e.received_at <= v_cutoff)))) then
        begin
          -- Skip keys someone is applying right now: they drain them.
          select k.next_seq into v_next from ${t.keys} k
           where k.source = p_source and k.stream = v_stream and k.key = v_key and k.state = 'open' for update skip locked;
          if found then
            select e.seq, (e.run_after is null or e.run_after <= now()) into v_first, v_due from ${t.events} e
             where e.source = p_source and e.stream = v_stream and e.key = v_key and e.status in ('held', 'pending') and e.seq >= v_next
             order by e.seq limit 1;
            if not found then
              null;
            elsif v_first = v_next then
              if v_due then
                v_action := 'drain';
                v_from := null;
                v_to := null;
              end if;
            elsif exists (
                select 1 from ${t.events} e
                 where e.source = p_source and e.stream = v_stream and e.key = v_key and e.status in ('held', 'pending')
                   and e.seq > v_next and e.received_at <= v_cutoff) then
              v_from := v_next;
              v_to := v_first - 1;
              if p_on_gap = 'skip' then
                insert into ${t.gaps} as g (source, key, from_seq, to_seq, reason, stream)
                  values (p_source, v_key, v_next, v_first - 1, 'timeout', v_stream)
                  on conflict on constraint ${t.local('gaps_pkey')} do update set to_seq = greatest(g.to_seq, excluded.to_seq);
                update ${t.keys} k set next_seq = v_first, updated_at = now() where k.source = p_source and k.stream = v_stream and k.key = v_key;
                v_action := 'skipped';
              else
                update ${t.keys} k set state = 'blocked', blocked_seq = v_next, blocked_reason = 'gap', updated_at = now()
                  where k.source = p_source and k.stream = v_stream and k.key = v_key;
                v_action := 'blocked';
              end if;
            end if;
          end if;
        exception when others then
          -- One bad key must not stop the step (and so every other key's gap timeout and retry).
          v_action := 'error';
          v_from := null;
          v_to := null;
          error := sqlstate || ': ' || sqlerrm;
        end;
      end if;
    end if;
    if v_action is not null then
      key := v_key;
      action := v_action;
      from_seq := v_from;
      to_seq := v_to;
      return next;
      v_chosen := v_chosen + 1;
    end if;
    if v_chosen >= p_limit or v_scanned >= p_scan then
      -- Stopped before the last key: the next step resumes after this one.
      key := v_key;
      action := 'resume';
      from_seq := null;
      to_seq := null;
      error := null;
      return next;
      return;
    end if;
  end loop;
end
$fn$;
`;
}

export interface SweepRow {
  key: string;
  /** 'error': this key failed (`error` says why); the step went on with the others. */
  action: 'drain' | 'skipped' | 'blocked' | 'error';
  fromSeq: number | null;
  toSeq: number | null;
  error: string | null;
}

/** What one step of the walk found, and where the next starts. */
export interface SweepStep {
  readonly rows: SweepRow[];
  /** The last key examined when the step stopped early; undefined: the walk reached the end. */
  readonly resumeAfter: string | undefined;
}

interface SweepResult {
  key: string;
  action: SweepRow['action'] | 'resume';
  from_seq: unknown;
  to_seq: unknown;
  error: string | null;
}

export function createSweep(names: StatementNames, t: Tables) {
  const statement = defineStatement<SweepResult>(
    names,
    t,
    'sweep',
    `select * from ${t.fn('sweep')}($1, $2::bigint, $3, $4, $5, $6)`,
  );
  return async function sweep(
    db: Queryable,
    source: string,
    gapTimeoutMs: number,
    onGap: 'skip' | 'block',
    limits: { readonly keys: number; readonly scan: number; readonly after: string | undefined },
  ): Promise<SweepStep> {
    const found = await statement.run(db, [
      source,
      gapTimeoutMs,
      onGap,
      limits.keys,
      limits.after ?? null,
      limits.scan,
    ]);
    let resumeAfter: string | undefined;
    const rows: SweepRow[] = [];
    for (const r of found) {
      if (r.action === 'resume') resumeAfter = r.key;
      else
        rows.push({
          key: r.key,
          action: r.action,
          fromSeq: toNumber(r.from_seq),
          toSeq: toNumber(r.to_seq),
          error: r.error ?? null,
        });
    }
    return { rows, resumeAfter };
  };
}
