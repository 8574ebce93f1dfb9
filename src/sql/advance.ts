import type { Kysely } from 'kysely';
import { toBoolean } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables } from './tables.js';

/**
 * `advance`: after a worker's handler, in its transaction: moves the cursor past the seq and
 * tells whether the next seq already waits. It takes the key's lock, so every claim that
 * decided "held" against the old cursor has committed and is seen here: no wake-up is lost.
 */
export function advanceFunction(t: Tables): string {
  return `
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
`;
}

/** One round trip, after the handler: move the key's cursor past `seq`; true when the next seq waits. */
export function createAdvance(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'advance',
    `select ${t.fn('advance')}($1, $2, $3::bigint) as more`,
  );
  return async function advance(db: Kysely<any>, source: string, key: string, seq: number): Promise<boolean> {
    const [row] = await statement.run<{ more: boolean }>(db, [source, key, seq]);
    return toBoolean(row?.more);
  };
}
