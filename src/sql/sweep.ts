import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables, toNumber } from './tables.js';

/**
 * `sweep`: one pass of the sweeper over the keys that wait. Returns the keys to drain: those
 * whose next event is already there and due (a drain was interrupted, or a failed run waits
 * for its retry), and those whose oldest held event waited past the gap timeout (the gap is
 * recorded and skipped, or the key blocked).
 */
export function sweepFunction(t: Tables): string {
  return `
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
`;
}

export interface SweepRow {
  key: string;
  action: 'drain' | 'skipped' | 'blocked';
  fromSeq: number | null;
  toSeq: number | null;
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
    }));
  };
}
