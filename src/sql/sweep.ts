import type { Kysely } from 'kysely';
import { toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables } from './tables.js';

/**
 * `sweep`: one pass of the sweeper over the keys that wait. Returns the keys to drain: those
 * whose next event is already there and due (a drain was interrupted, or a failed run waits
 * for its retry), and those whose oldest held event waited past the gap timeout (the gap is
 * recorded and skipped, or the key blocked).
 *
 * Only keys with something to do now are chosen (a due event at the cursor, or a timed-out
 * gap), so keys that merely wait (a retry's backoff, a young gap) or rows left behind by an
 * older version cannot fill the limit and starve the others. Each key is handled in a block
 * of its own: an error there is returned as that key's `error` row and the pass goes on.
 * The caller runs it READ COMMITTED: each statement must see claims committed meanwhile.
 */
export function sweepFunction(t: Tables): string {
  return `
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

export interface SweepRow {
  key: string;
  /** 'error': this key failed (`error` says why); the pass went on with the others. */
  action: 'drain' | 'skipped' | 'blocked' | 'error';
  fromSeq: number | null;
  toSeq: number | null;
  error: string | null;
}

/** One round trip per sweeper pass. */
export function createSweep(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'sweep',
    `select * from ${t.fn('sweep')}($1, $2::bigint, $3, $4)`,
  );
  return async function sweep(
    db: Kysely<any>,
    source: string,
    gapTimeoutMs: number,
    onGap: 'skip' | 'block',
    limit: number,
  ): Promise<SweepRow[]> {
    const rows = await statement.run<any>(db, [source, gapTimeoutMs, onGap, limit]);
    return rows.map((r) => ({
      key: r.key,
      action: r.action,
      fromSeq: toNumber(r.from_seq),
      toSeq: toNumber(r.to_seq),
      error: r.error ?? null,
    }));
  };
}
