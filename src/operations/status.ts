/** The inbox at a glance, each count on one partial index; processed ones estimated past a bound. */
import { type RawBuilder, sql } from 'kysely';
import { ageMs, eachSource, type OperationsContext, scoped, sourceIs, sourcesIn, table } from './context.js';

export const PROCESSED_EXACT_UP_TO = 100_000;

export interface InboxStatus {
  readonly sources: string[];
  /** Events by status. `processed` is exact up to 100,000, PostgreSQL's estimate above (`processedIsEstimate`). */
  readonly events: { pending: number; held: number; processed: number; dead: number };
  readonly processedIsEstimate: boolean;
  readonly keys: { blocked: number; holding: number };
  readonly oldestHeldAgeMs: number | null;
  readonly oldestPendingAgeMs: number | null;
  readonly deadByReason: Record<string, number>;
  /** Events no handler takes (option `handlers`), recorded `ignored`, by type (`''`: without one). */
  readonly ignoredByType: Record<string, number>;
}

export async function status(ctx: OperationsContext, asked?: string): Promise<InboxStatus> {
  const source = scoped(ctx, asked);
  const events = table(ctx, 'events');
  const read = async (query: RawBuilder<any>) => (await query.execute(ctx.db)).rows;
  const waiting = await read(sql`
    select e.status, count(*) as n, extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_age_ms
      from ${events} e where e.status in ('held', 'pending') and ${sourceIs('e.source', source)}
     group by e.status`);
  const dead = await read(sql`
    select e.dead_reason, count(*) as n from ${events} e
     where e.status = 'dead' and ${sourceIs('e.source', source)} group by e.dead_reason`);
  const ignored = await read(sql`
    select e.type, count(*) as n from ${events} e
     where e.status = 'ignored' and ${sourceIs('e.source', source)} group by e.type`);
  // Ordered by the index on (source, processed_at), so the planner reads it (a LIMIT alone may scan).
  let processed = 0;
  let processedIsEstimate = false;
  for (const from of await eachSource(ctx, source)) {
    const [{ n }] = await read(sql`
      select count(*) as n from (select 1 from ${events} e where e.source = ${from} and e.status = 'processed'
                                  order by e.processed_at desc limit ${PROCESSED_EXACT_UP_TO + 1}) x`);
    processed += Number(n);
    processedIsEstimate ||= Number(n) > PROCESSED_EXACT_UP_TO;
  }
  if (processedIsEstimate) processed = Math.max(processed, await processedEstimate(ctx, source));
  const [blocked] = await read(sql`
    select count(*) as n from ${table(ctx, 'keys')} k where k.state = 'blocked' and ${sourceIs('k.source', source)}`);
  const [holding] = await read(sql`
    select count(distinct (e.source, e.key)) as n from ${events} e
     where e.status in ('held', 'pending') and e.key is not null and ${sourceIs('e.source', source)}`);
  const sources = await read(sql`
    select source from ${sourcesIn(ctx, 'events')} e where ${sourceIs('e.source', source)}
     union select source from ${sourcesIn(ctx, 'keys')} k where ${sourceIs('k.source', source)}
     order by source`);
  const held = waiting.find((r) => r.status === 'held');
  const pending = waiting.find((r) => r.status === 'pending');
  const deadByReason: Record<string, number> = {};
  for (const r of dead) deadByReason[r.dead_reason ?? 'unknown'] = Number(r.n);
  const ignoredByType: Record<string, number> = {};
  for (const r of ignored) ignoredByType[r.type ?? ''] = Number(r.n);
  return {
    sources: sources.map((s) => s.source),
    events: {
      pending: Number(pending?.n ?? 0),
      held: Number(held?.n ?? 0),
      processed,
      dead: dead.reduce((sum, r) => sum + Number(r.n), 0),
    },
    processedIsEstimate,
    keys: { blocked: Number(blocked.n), holding: Number(holding.n) },
    oldestHeldAgeMs: ageMs(held?.oldest_age_ms),
    oldestPendingAgeMs: ageMs(pending?.oldest_age_ms),
    deadByReason,
    ignoredByType,
  };
}

/** `reltuples` times the share of `processed` (and of the source) in ANALYZE's most common values. */
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
