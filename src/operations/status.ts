/**
 * The inbox at a glance. Every count reads one partial index, never the whole events table:
 * processed rows are counted up to PROCESSED_EXACT_UP_TO and estimated past that.
 */
import { sql } from 'kysely';
import { ageMs, eachSource, type OperationsContext, scoped, sourceIs, sourcesIn, table } from './context.js';

export const PROCESSED_EXACT_UP_TO = 100_000;

export interface InboxStatus {
  /** Sources present in the events or keys tables (narrowed by `source`). */
  readonly sources: string[];
  /**
   * Events by status. `processed` is exact up to 100,000; above that it is PostgreSQL's
   * estimate (the table's row count and the share of processed rows, as ANALYZE last saw them),
   * and `processedIsEstimate` says so.
   */
  readonly events: { pending: number; held: number; processed: number; dead: number };
  readonly processedIsEstimate: boolean;
  readonly keys: { blocked: number; holding: number };
  /** Age of the oldest held event, in ms (the one a gap or a blocked key keeps waiting). */
  readonly oldestHeldAgeMs: number | null;
  /** Age of the oldest pending event, in ms (waiting for a worker or a retry). */
  readonly oldestPendingAgeMs: number | null;
  readonly deadByReason: Record<string, number>;
  /** Events no handler takes (option `handlers`), recorded `ignored`, by type (`''`: without one). */
  readonly ignoredByType: Record<string, number>;
}

export async function status(ctx: OperationsContext, asked?: string): Promise<InboxStatus> {
  const source = scoped(ctx, asked);
  const events = table(ctx, 'events');
  const keys = table(ctx, 'keys');
  const { rows: waiting } = await sql<any>`
    select e.status, count(*) as n, extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_age_ms
      from ${events} e where e.status in ('held', 'pending') and ${sourceIs('e.source', source)}
     group by e.status`.execute(ctx.db);
  const { rows: dead } = await sql<any>`
    select e.dead_reason, count(*) as n from ${events} e
     where e.status = 'dead' and ${sourceIs('e.source', source)} group by e.dead_reason`.execute(ctx.db);
  const { rows: ignored } = await sql<any>`
    select e.type, count(*) as n from ${events} e
     where e.status = 'ignored' and ${sourceIs('e.source', source)} group by e.type`.execute(ctx.db);
  // Each source's newest processed rows, ordered by their index on (source, processed_at) so the
  // planner reads the index (a LIMIT alone lets it scan the table). Source by source: see eachSource.
  let processedCount = 0;
  let processedIsEstimate = false;
  for (const from of await eachSource(ctx, source)) {
    const { rows } = await sql<{ n: string }>`
      select count(*) as n from (select 1 from ${events} e where e.source = ${from} and e.status = 'processed'
                                  order by e.processed_at desc limit ${PROCESSED_EXACT_UP_TO + 1}) x`.execute(
      ctx.db,
    );
    processedCount += Number(rows[0].n);
    processedIsEstimate ||= Number(rows[0].n) > PROCESSED_EXACT_UP_TO;
  }
  if (processedIsEstimate) processedCount = Math.max(processedCount, await processedEstimate(ctx, source));
  const { rows: blocked } = await sql<any>`
    select count(*) as n from ${keys} k where k.state = 'blocked' and ${sourceIs('k.source', source)}`.execute(
    ctx.db,
  );
  const { rows: holding } = await sql<any>`
    select count(distinct (e.source, e.key)) as n from ${events} e
     where e.status in ('held', 'pending') and e.key is not null and ${sourceIs('e.source', source)}`.execute(
    ctx.db,
  );
  const { rows: sources } = await sql<any>`
    select source from ${sourcesIn(ctx, 'events')} e where ${sourceIs('e.source', source)}
     union select source from ${sourcesIn(ctx, 'keys')} k where ${sourceIs('k.source', source)}
     order by source`.execute(ctx.db);
  const byStatus = { pending: 0, held: 0, processed: processedCount, dead: 0 };
  const deadByReason: Record<string, number> = {};
  const ignoredByType: Record<string, number> = {};
  let oldestHeld: number | null = null;
  let oldestPending: number | null = null;
  for (const r of waiting) {
    byStatus[r.status as 'held' | 'pending'] = Number(r.n);
    if (r.status === 'held') oldestHeld = ageMs(r.oldest_age_ms);
    if (r.status === 'pending') oldestPending = ageMs(r.oldest_age_ms);
  }
  for (const r of dead) {
    byStatus.dead += Number(r.n);
    deadByReason[r.dead_reason ?? 'unknown'] = Number(r.n);
  }
  for (const r of ignored) ignoredByType[r.type ?? ''] = Number(r.n);
  return {
    sources: sources.map((s) => s.source),
    events: byStatus,
    processedIsEstimate,
    keys: { blocked: Number(blocked[0].n), holding: Number(holding[0].n) },
    oldestHeldAgeMs: oldestHeld,
    oldestPendingAgeMs: oldestPending,
    deadByReason,
    ignoredByType,
  };
}

/**
 * PostgreSQL's estimate of the processed rows: `reltuples` times the share of `processed` (and of the
 * source) in ANALYZE's most common values; 0 when the table was never analyzed.
 */
async function processedEstimate(ctx: OperationsContext, source: string | undefined): Promise<number> {
  const share = (column: string, value: string) => sql`coalesce((
      select m.f from pg_stats st
       cross join lateral unnest(st.most_common_vals::text::text[], st.most_common_freqs) m(v, f)
       where st.schemaname = ${ctx.tables.schema} and st.tablename = ${`${ctx.tables.prefix}events`}
         and st.attname = ${column} and m.v = ${value}), 1)`;
  const { rows } = await sql<any>`
    select greatest(c.reltuples, 0) * ${share('status', 'processed')}
           * ${source === undefined ? sql`1` : share('source', source)} as n
      from pg_class c where c.oid = to_regclass(${ctx.tables.events})`.execute(ctx.db);
  return Math.round(Number(rows[0]?.n ?? 0));
}
