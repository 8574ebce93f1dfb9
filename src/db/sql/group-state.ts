import { toDate, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';
import { groupSlotKey } from './take-grouped.js';

/**
 * A group's row, written only riding on COMMIT, so no running handler's transaction holds it.
 * `spendGroupRate`: `n` events ran (GCRA). `holdGroup`: RetryLater naming the group, until `until`.
 */
export function createGroupState(names: StatementNames, t: Tables) {
  const spend = defineStatement(
    names,
    t,
    'spend_group_rate',
    `insert into ${t.groups} as g (source, group_key, rate_at) values ($1, $2, now() + $3 * interval '1 millisecond')
       on conflict (source, group_key) do update set rate_at = greatest(g.rate_at, now()) + $3 * interval '1 millisecond'`,
    { rides: 'commit' },
  );
  const hold = defineStatement(
    names,
    t,
    'hold_group',
    `insert into ${t.groups} as g (source, group_key, held_until) values ($1, $2, $3::timestamptz)
       on conflict (source, group_key) do update set held_until = excluded.held_until`,
    { rides: 'commit' },
  );
  return {
    async spendGroupRate(db: Queryable, source: string, group: string, ms: number): Promise<void> {
      await spend.run(db, [source, group, ms]);
    },
    async holdGroup(db: Queryable, source: string, group: string, until: Date): Promise<void> {
      await hold.run(db, [source, group, until]);
    },
  };
}

/** A group as operators see it: what waits, what runs now (its slots held, on every instance). */
export interface GroupRow {
  readonly group: string;
  readonly pending: number;
  readonly due: number;
  readonly running: number;
  readonly heldUntil: Date | null;
  readonly oldestAgeMs: number | null;
}

/** The busiest groups (most pending first), over the group index; `running` reads pg_locks. */
export function createBusiestGroups(names: StatementNames, t: Tables) {
  const statement = defineStatement<Record<string, unknown>>(
    names,
    t,
    'busiest_groups',
    `select w.group_key, w.pending, w.due, w.oldest_age_ms, g.held_until,
            (select count(*) from pg_locks l where l.locktype = 'advisory' and l.granted and l.objsubid = 2
               and l.classid = (${groupSlotKey(t, '$1::text', 'w.group_key')} & 4294967295)::bigint::oid) as running
       from (select e.group_key, count(*) as pending,
                    count(*) filter (where coalesce(e.run_after, e.received_at) <= now()) as due,
                    extract(epoch from now() - min(e.received_at)) * 1000 as oldest_age_ms
               from ${t.events} e where e.source = $1 and e.status = 'pending' and e.key is null and e.group_key <> ''
              group by e.group_key order by count(*) desc limit $2) w
       left join ${t.groups} g on g.source = $1 and g.group_key = w.group_key
      order by w.pending desc, w.group_key`,
  );
  return async function busiestGroups(db: Queryable, source: string, limit: number): Promise<GroupRow[]> {
    const rows = await statement.run(db, [source, limit]);
    return rows.map((r) => ({
      group: String(r.group_key),
      pending: toNumber(r.pending) ?? 0,
      due: toNumber(r.due) ?? 0,
      running: toNumber(r.running) ?? 0,
      heldUntil: r.held_until == null ? null : toDate(r.held_until as string),
      oldestAgeMs: r.oldest_age_ms == null ? null : Math.round(toNumber(r.oldest_age_ms) ?? 0),
    }));
  };
}
