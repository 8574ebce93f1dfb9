/** Ignored events (no handler takes their type), and their replay, a re-queue, once a handler exists. */
import { sql } from 'kysely';
import { type StoredEvent, toStoredEvent } from '../db/sql/inspect.js';
import { ageMs, limitOf, MAX_LIST, type OperationsContext, scoped, sourceIs, table } from './context.js';

export interface IgnoredFilter {
  source?: string;
  type?: string;
  /** At most this many, newest first. @defaultValue 100 */
  limit?: number;
}

/** An ignored event, with its payload (kept for a replay). */
export interface IgnoredEvent extends StoredEvent {
  readonly source: string;
  readonly ageMs: number;
}

/** How many events of one type are ignored now, and when the last one came. */
export interface IgnoredType {
  readonly source: string;
  readonly type: string | null;
  readonly count: number;
  readonly lastReceivedAt: Date;
}

/** What `replayIgnored` did (or, with `dryRun`, would do). */
export interface IgnoredReplayResult {
  readonly type: string;
  /** Re-queued as pending: applied by the application's sweeper (or at once by `inbox.replayIgnored`). */
  readonly requeued: number;
  /** The ids re-queued, in the order they were received. */
  readonly ids: readonly string[];
  /** Ordered events of that type, left ignored: their key's cursor moved past them. */
  readonly ordered: number;
  readonly dryRun: boolean;
}

export async function ignoredEvents(
  ctx: OperationsContext,
  filter: IgnoredFilter = {},
): Promise<IgnoredEvent[]> {
  const { rows } = await sql<any>`
    select e.*, e.result::text as result_text, extract(epoch from (now() - e.received_at)) * 1000 as age_ms
      from ${table(ctx, 'events')} e
     where e.status = 'ignored' and ${sourceIs('e.source', scoped(ctx, filter.source))}
       ${filter.type === undefined ? sql`` : sql`and e.type = ${filter.type}`}
     order by e.received_at desc, e.source, e.id
     limit ${limitOf(filter.limit, 100)}`.execute(ctx.db);
  return rows.map((r) => ({ ...toStoredEvent(r), source: r.source, ageMs: ageMs(r.age_ms)! }));
}

export async function ignoredTypes(ctx: OperationsContext, asked?: string): Promise<IgnoredType[]> {
  const { rows } = await sql<any>`
    select e.source, e.type, count(*)::int as count, max(e.received_at) as last_received_at
      from ${table(ctx, 'events')} e
     where e.status = 'ignored' and ${sourceIs('e.source', scoped(ctx, asked))}
     group by e.source, e.type
     order by count(*) desc, e.source, e.type`.execute(ctx.db);
  return rows.map((r) => ({
    source: r.source,
    type: r.type,
    count: Number(r.count),
    lastReceivedAt: new Date(r.last_received_at),
  }));
}

/** One statement, chosen unlocked (Citus); the UPDATE re-checks the status, so each row is taken once. */
export async function replayIgnored(
  ctx: OperationsContext,
  selection: { type: string; source?: string; dryRun?: boolean },
): Promise<IgnoredReplayResult> {
  const events = table(ctx, 'events');
  const of = sql`e.status = 'ignored' and e.type = ${selection.type} and ${sourceIs('e.source', scoped(ctx, selection.source))}`;
  const { rows: counted } = await sql<any>`
    select count(*) filter (where e.key is not null)::int as ordered from ${events} e where ${of}`.execute(
    ctx.db,
  );
  const ordered = Number(counted[0].ordered);
  const chosen = sql<any>`select e.source, e.stream, e.id from ${events} e where ${of} and e.key is null
                      order by e.received_at, e.id limit ${MAX_LIST}`;
  const dryRun = Boolean(selection.dryRun);
  const { rows } = dryRun
    ? await chosen.execute(ctx.db)
    : await sql<any>`
    update ${events} u set status = 'pending', attempts = 0, run_after = now(), processed_at = null
      from (${chosen}) c
     where u.source = c.source and u.stream = c.stream and u.id = c.id and u.status = 'ignored'
    returning u.id, u.received_at`.execute(ctx.db);
  if (!dryRun) rows.sort((a, b) => new Date(a.received_at).getTime() - new Date(b.received_at).getTime());
  const ids: string[] = rows.map((r) => r.id);
  return { type: selection.type, requeued: ids.length, ids, ordered, dryRun };
}
