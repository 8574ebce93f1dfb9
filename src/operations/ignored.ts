/**
 * Ignored events (no handler takes their type), and their replay once a handler exists: a re-queue,
 * as a dead letter's, applied through the ordinary apply path where the type is routed again.
 */
import { sql } from 'kysely';
import { type StoredEvent, toStoredEvent } from '../db/sql/inspect.js';
import { ageMs, limitOf, MAX_LIST, type OperationsContext, sourceIs, table } from './context.js';

/** Narrows a list of ignored events. */
export interface IgnoredFilter {
  source?: string;
  /** Only events of this type. */
  type?: string;
  /** At most this many, newest first. @defaultValue 100 */
  limit?: number;
}

/** An ignored event, as an operator sees it (with its payload: it is kept for a replay). */
export interface IgnoredEvent extends StoredEvent {
  readonly source: string;
  /** Age since it was received, in ms. */
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
  /**
   * Ordered events of that type (a key and seq), left ignored: their key's cursor moved past
   * them when they were ignored, and applying one now would break the order.
   */
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
     where e.status = 'ignored' and ${sourceIs('e.source', filter.source ?? ctx.source)}
       ${filter.type === undefined ? sql`` : sql`and e.type = ${filter.type}`}
     order by e.received_at desc, e.source, e.id
     limit ${limitOf(filter.limit, 100)}`.execute(ctx.db);
  return rows.map((r) => ({ ...toStoredEvent(r), source: r.source, ageMs: ageMs(r.age_ms)! }));
}

export async function ignoredTypes(ctx: OperationsContext, source = ctx.source): Promise<IgnoredType[]> {
  const { rows } = await sql<any>`
    select e.source, e.type, count(*)::int as count, max(e.received_at) as last_received_at
      from ${table(ctx, 'events')} e
     where e.status = 'ignored' and ${sourceIs('e.source', source)}
     group by e.source, e.type
     order by count(*) desc, e.source, e.type`.execute(ctx.db);
  return rows.map((r) => ({
    source: r.source,
    type: r.type,
    count: Number(r.count),
    lastReceivedAt: new Date(r.last_received_at),
  }));
}

/**
 * Re-queues the unordered ignored events of `type`, oldest first, in one statement. An ignored row is
 * final: only a prune or another replay writes it meanwhile, and the UPDATE re-checks its status under
 * the row lock, so each row goes to one of them. Chosen unlocked, written by stream and id: no
 * statement locks rows across a Citus cluster's shards.
 */
export async function replayIgnored(
  ctx: OperationsContext,
  selection: { type: string; source?: string; dryRun?: boolean },
): Promise<IgnoredReplayResult> {
  const events = table(ctx, 'events');
  const of = sql`e.status = 'ignored' and e.type = ${selection.type} and ${sourceIs('e.source', selection.source ?? ctx.source)}`;
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
