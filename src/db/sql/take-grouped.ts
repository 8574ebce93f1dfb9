import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';
import { type StoredEventRow, TAKEN_EVENT_OUTPUT, type TakenEvent, toTakenEvent } from './taken-event.js';

/** A group's slot: a transaction-scoped advisory lock, freed at COMMIT or when the session dies. */
export function groupSlotKey(t: Tables, source: string, group: string): string {
  return `hashtext('${t.groups}/' || ${source} || '/' || ${group})`;
}

/**
 * `take_grouped`: `take_pending` by groups, round-robin from after `p_after`, to the first group that is
 * not held, has rate room, a due event and a free slot; takes up to `p_limit` (one when rated). None:
 * a row with a null id and, in `wake_at`, when a group it passed has room again.
 */
export function takeGroupedFunction(t: Tables): string {
  return `
create or replace function ${t.fn('take_grouped')}(
  p_source text, p_limit integer, p_after text, p_slots integer, p_slot_map jsonb,
  p_rate_count integer, p_rate_ms integer, p_rate_map jsonb
) returns table (id text, body_hash text, payload bytea, headers jsonb, attempts integer, received_at timestamptz,
                 group_key text, wake_at timestamptz)
language plpgsql as $fn$
declare
  v_g text;
  v_after text := p_after;
  v_wrapped boolean := p_after is null;
  v_held timestamptz;
  v_rate_at timestamptz;
  v_count integer;
  v_ms integer;
  v_slots integer;
  v_slot boolean;
  v_ready timestamptz;
  v_wake timestamptz;
  v_limit integer;
  v_first boolean := true;
  v_ev ${t.events}%rowtype;
begin
  loop
    if v_after is null then
      select e.group_key into v_g from ${t.events} e
       where e.source = p_source and e.status = 'pending' and e.key is null order by e.group_key limit 1;
    else
      select e.group_key into v_g from ${t.events} e
       where e.source = p_source and e.status = 'pending' and e.key is null and e.group_key > v_after
       order by e.group_key limit 1;
    end if;
    if not found then
      exit when v_wrapped;
      v_wrapped := true;
      v_after := null;
      continue;
    end if;
    exit when v_wrapped and p_after is not null and v_g > p_after;
    v_after := v_g;
    select g.held_until, g.rate_at into v_held, v_rate_at from ${t.groups} g
     where g.source = p_source and g.group_key = v_g;
    -- The events without a group ('') share no limit.
    v_count := case when v_g <> '' then coalesce((p_rate_map -> v_g ->> 0)::integer, p_rate_count) end;
    v_ms := coalesce((p_rate_map -> v_g ->> 1)::integer, p_rate_ms);
    -- GCRA: rate_at runs one interval ahead per event; room while it is within the period of now.
    v_ready := greatest(v_held, v_rate_at - (v_ms - v_ms / v_count) * interval '1 millisecond');
    if v_ready > now() then
      v_wake := least(v_wake, v_ready);
      continue;
    end if;
    continue when not exists (select 1 from ${t.events} e
      where e.source = p_source and e.group_key = v_g and e.status = 'pending' and e.key is null
        and coalesce(e.run_after, e.received_at) <= now());
    v_slots := case when v_g <> '' then coalesce((p_slot_map ->> v_g)::integer, p_slots) end;
    if v_slots is not null then
      v_slot := false;
      for i in 0 .. v_slots - 1 loop
        v_slot := pg_try_advisory_xact_lock(${groupSlotKey(t, 'p_source', 'v_g')}, i);
        exit when v_slot;
      end loop;
      continue when not v_slot;
    end if;
    v_limit := case when v_count is null then p_limit else 1 end;
    for v_ev in
      select * from ${t.events} e
       where e.source = p_source and e.group_key = v_g and e.status = 'pending' and e.key is null
         and coalesce(e.run_after, e.received_at) <= now()
       order by coalesce(e.run_after, e.received_at)
       limit v_limit
       for update skip locked
    loop
      if v_first then
        -- Read again once a row is locked: a RetryLater that committed while this take waited for
        -- the row holds the group now.
        select g.held_until into v_held from ${t.groups} g where g.source = p_source and g.group_key = v_g;
        if v_held > now() then
          wake_at := v_held;
          return next;
          return;
        end if;
        v_first := false;
      end if;
      ${TAKEN_EVENT_OUTPUT}
      group_key := v_g;
      return next;
    end loop;
    if not v_first then return; end if;
    -- Its due events were taken meanwhile, under a slot this transaction now holds: ask again.
    wake_at := now();
    return next;
    return;
  end loop;
  wake_at := v_wake;
  return next;
end
$fn$;
`;
}

/** A group's limits as the take binds them: slots and rate, by default and per group. */
export interface GroupLimits {
  readonly slots: number | null;
  readonly slotMap: string | null;
  readonly rate: { readonly count: number; readonly ms: number } | null;
  readonly rateMap: string | null;
}

export function createTakeGrouped(names: StatementNames, t: Tables) {
  const statement = defineStatement<StoredEventRow & { group_key: string; wake_at: unknown }>(
    names,
    t,
    'take_grouped',
    `select id, body_hash, payload, headers::text as headers, attempts, received_at, group_key, wake_at
       from ${t.fn('take_grouped')}($1, $2, $3, $4, $5::jsonb, $6, $7, $8::jsonb)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function takeGrouped(
    db: Queryable,
    source: string,
    limit: number,
    after: string | null,
    limits: GroupLimits,
  ): Promise<{ events: TakenEvent[]; wakeAt: Date | null }> {
    const rows = await statement.run(db, [
      source,
      limit,
      after,
      limits.slots,
      limits.slotMap,
      limits.rate?.count ?? null,
      limits.rate?.ms ?? null,
      limits.rateMap,
    ]);
    const events: TakenEvent[] = [];
    let wakeAt: Date | null = null;
    for (const row of rows) {
      if (row.id === null) wakeAt = row.wake_at === null ? null : new Date(row.wake_at as string | Date);
      else events.push({ ...toTakenEvent(row, null, null), group: row.group_key });
    }
    return { events, wakeAt };
  };
}
