import { toBoolean, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * `advance`: after a worker's handler, moves the cursor past the seq and says whether the next waits.
 * The key's lock orders it after every claim that saw the old cursor; a due gap after it is settled here.
 */
export function advanceFunction(t: Tables): string {
  return `
create or replace function ${t.fn('advance')}(p_source text, p_key text, p_seq bigint, p_gap_timeout_ms bigint,
                                               p_on_gap text)
returns table (more boolean, skipped_from bigint, skipped_to bigint, blocked boolean)
language plpgsql as $fn$
declare
  v_first bigint;
  v_stream text := ${stream('p_key')};
begin
  update ${t.keys} k set next_seq = p_seq + 1, updated_at = now()
   where k.source = p_source and k.stream = v_stream and k.key = p_key and k.next_seq = p_seq;
  if not found then
    -- The cursor moved under us (an operator skipped this seq): roll back, apply nothing.
    raise exception 'webhook-inbox: cursor of key moved during apply' using errcode = '40001';
  end if;
  more := exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
                  and e.seq = p_seq + 1 and e.status in ('held', 'pending'));
  blocked := false;
  if not more and p_gap_timeout_ms is not null
     and exists (select 1 from ${t.events} e where e.source = p_source and e.stream = v_stream and e.key = p_key
                 and e.seq > p_seq + 1 and e.status in ('held', 'pending')
                 and e.received_at <= now() - p_gap_timeout_ms * interval '1 millisecond') then
    -- ORDER BY ... LIMIT 1, not min(): one index read whatever the planner knows of the table
    -- (src/db/sql/claim.ts says why).
    select e.seq into v_first from ${t.events} e
     where e.source = p_source and e.stream = v_stream and e.key = p_key and e.seq > p_seq + 1 and e.status in ('held', 'pending')
     order by e.seq limit 1;
    if p_on_gap = 'skip' then
      insert into ${t.gaps} as g (source, key, from_seq, to_seq, reason, stream)
        values (p_source, p_key, p_seq + 1, v_first - 1, 'timeout', v_stream)
        on conflict on constraint ${t.local('gaps_pkey')} do update set to_seq = greatest(g.to_seq, excluded.to_seq);
      update ${t.keys} k set next_seq = v_first, updated_at = now() where k.source = p_source and k.stream = v_stream and k.key = p_key;
      skipped_from := p_seq + 1;
      skipped_to := v_first - 1;
      more := true;
    else
      update ${t.keys} k set state = 'blocked', blocked_seq = p_seq + 1, blocked_reason = 'gap', updated_at = now()
        where k.source = p_source and k.stream = v_stream and k.key = p_key;
      skipped_from := p_seq + 1;
      blocked := true;
    end if;
  end if;
  return next;
end
$fn$;
`;
}

/** What `advance` did besides moving the cursor. */
export interface Advanced {
  /** The next seq waits (or a gap before it was skipped): the key's drain goes on. */
  readonly more: boolean;
  /** A timed-out gap settled here: its first seq, and its last when skipped. */
  readonly gap?: { readonly fromSeq: number; readonly toSeq: number | null; readonly blocked: boolean };
}

interface AdvanceResult {
  more: unknown;
  skipped_from: unknown;
  skipped_to: unknown;
  blocked: unknown;
}

export function createAdvance(names: StatementNames, t: Tables) {
  const statement = defineStatement<AdvanceResult>(
    names,
    t,
    'advance',
    `select more, skipped_from, skipped_to, blocked from ${t.fn('advance')}($1, $2, $3::bigint, $4::bigint, $5)`,
  );
  return async function advance(
    db: Queryable,
    source: string,
    key: string,
    seq: number,
    gapTimeoutMs: number,
    onGap: 'skip' | 'block',
  ): Promise<Advanced> {
    const [row] = await statement.run(db, [source, key, seq, gapTimeoutMs, onGap]);
    const fromSeq = toNumber(row?.skipped_from);
    return {
      more: toBoolean(row?.more),
      gap:
        fromSeq === null
          ? undefined
          : { fromSeq, toSeq: toNumber(row?.skipped_to), blocked: toBoolean(row?.blocked) },
    };
  };
}
