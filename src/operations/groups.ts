import { sql } from 'kysely';
import { groupSlotKey } from '../db/sql/take-grouped.js';
import { ageMs, type OperationsContext, scoped, sourceIs, table } from './context.js';

export interface GroupSummary {
  readonly source: string;
  readonly group: string;
  /** Unordered events waiting; `due` of them may run now. */
  readonly pending: number;
  readonly due: number;
  /** Handlers running now on every instance (the group's slots held). */
  readonly running: number;
  /** RetryLater named the group: its events wait until then. */
  readonly heldUntil: Date | null;
  readonly oldestAgeMs: number | null;
}

export async function busiestGroups(
  ctx: OperationsContext,
  limit = 20,
  asked?: string,
): Promise<GroupSummary[]> {
  const source = scoped(ctx, asked);
  const slot = sql.raw(groupSlotKey(ctx.tables, 'w.source', 'w.group_key'));
  const { rows } = await sql<any>`
    select w.*, g.held_until,
           (select count(*) from pg_locks l where l.locktype = 'advisory' and l.granted and l.objsubid = 2
              and l.classid = (${slot} & 4294967295)::bigint::oid)::int as running
      from (select e.source, e.group_key, count(*)::int as pending,
                   (count(*) filter (where coalesce(e.run_after, e.received_at) <= now()))::int as due,
                   extract(epoch from now() - min(e.received_at)) * 1000 as oldest_age_ms
              from ${table(ctx, 'events')} e
             where e.status = 'pending' and e.key is null and e.group_key <> '' and ${sourceIs('e.source', source)}
             group by e.source, e.group_key order by count(*) desc limit ${limit}) w
      left join ${sql.raw(ctx.tables.groups)} g on g.source = w.source and g.group_key = w.group_key
     order by w.pending desc, w.source, w.group_key`.execute(ctx.db);
  return rows.map((r) => ({
    source: r.source,
    group: r.group_key,
    pending: Number(r.pending),
    due: Number(r.due),
    running: Number(r.running),
    heldUntil: r.held_until === null ? null : new Date(r.held_until),
    oldestAgeMs: ageMs(r.oldest_age_ms),
  }));
}
