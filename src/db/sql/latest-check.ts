import { toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** `latest_check`: an older taken event is `superseded`; `busy` when the object's key row is held. */
export function latestCheckFunction(t: Tables): string {
  return `
create or replace function ${t.fn('latest_check')}(p_source text, p_key text, p_version bigint)
returns table (decision text, latest bigint)
language plpgsql as $fn$
declare
  v_last bigint;
  v_stream text := ${stream('p_key')};
begin
  select k.last_version into v_last from ${t.keys} k
   where k.source = p_source and k.stream = v_stream and k.key = p_key for update skip locked;
  if not found then
    insert into ${t.keys} as k (source, key, next_seq, stream) values (p_source, p_key, 1, v_stream)
      on conflict (source, key, stream) do nothing;
    if not found then
      select k.last_version into v_last from ${t.keys} k
       where k.source = p_source and k.stream = v_stream and k.key = p_key for update skip locked;
      if not found then
        decision := 'busy';
        return next;
        return;
      end if;
    end if;
  end if;
  latest := v_last;
  if v_last is not null and p_version < v_last then
    decision := 'superseded';
  else
    update ${t.keys} k set last_version = p_version, updated_at = now()
      where k.source = p_source and k.stream = v_stream and k.key = p_key;
    decision := 'apply';
  end if;
  return next;
end
$fn$;
`;
}

export interface LatestCheck {
  readonly decision: 'apply' | 'superseded' | 'busy';
  /** The version last applied for the key before this check. */
  readonly latest: number | null;
}

export function createLatestCheck(names: StatementNames, t: Tables) {
  const statement = defineStatement<{ decision: LatestCheck['decision']; latest: unknown }>(
    names,
    t,
    'latest_check',
    `select decision, latest from ${t.fn('latest_check')}($1, $2, $3::bigint)`,
  );
  return async function latestCheck(
    db: Queryable,
    source: string,
    key: string,
    version: number,
  ): Promise<LatestCheck> {
    const [row] = await statement.run(db, [source, key, version]);
    return { decision: row?.decision ?? 'busy', latest: toNumber(row?.latest) };
  };
}
