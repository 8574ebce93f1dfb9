/** The inbox at a glance: counts by status, blocked keys, oldest waiting ages, dead letters by reason. */
import { sql } from 'kysely';
import { ageMs, type OperationsContext, scoped, sourceIs, table } from './context.js';

export interface InboxStatus {
  /** Sources present in the events or keys tables (narrowed by `source`). */
  readonly sources: string[];
  readonly events: { pending: number; held: number; processed: number; dead: number };
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
  const { rows: counts } = await sql<any>`
    select e.source, e.status, e.dead_reason, e.type, count(*) as n,
           extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_age_ms
      from ${events} e where ${sourceIs('e.source', source)}
     group by e.source, e.status, e.dead_reason, e.type`.execute(ctx.db);
  const { rows: blocked } = await sql<any>`
    select k.source, count(*) as n from ${keys} k
     where k.state = 'blocked' and ${sourceIs('k.source', source)} group by k.source`.execute(ctx.db);
  const { rows: holding } = await sql<any>`
    select count(distinct (e.source, e.key)) as n from ${events} e
     where e.status in ('held', 'pending') and e.key is not null and ${sourceIs('e.source', source)}`.execute(
    ctx.db,
  );
  const { rows: sources } = await sql<any>`
    select distinct source from (
      select source from ${events} union all select source from ${keys}
    ) s where ${sourceIs('s.source', source)} order by source`.execute(ctx.db);
  const byStatus = { pending: 0, held: 0, processed: 0, dead: 0 };
  const deadByReason: Record<string, number> = {};
  const ignoredByType: Record<string, number> = {};
  let oldestHeld: number | null = null;
  let oldestPending: number | null = null;
  for (const r of counts) {
    const n = Number(r.n);
    if (r.status === 'ignored') {
      ignoredByType[r.type ?? ''] = (ignoredByType[r.type ?? ''] ?? 0) + n;
      continue;
    }
    byStatus[r.status as keyof typeof byStatus] += n;
    if (r.status === 'dead') {
      const reason = r.dead_reason ?? 'unknown';
      deadByReason[reason] = (deadByReason[reason] ?? 0) + n;
    }
    const age = ageMs(r.oldest_age_ms);
    if (r.status === 'held') oldestHeld = Math.max(oldestHeld ?? 0, age ?? 0);
    if (r.status === 'pending') oldestPending = Math.max(oldestPending ?? 0, age ?? 0);
  }
  return {
    sources: sources.map((s) => s.source),
    events: byStatus,
    keys: { blocked: blocked.reduce((sum, k) => sum + Number(k.n), 0), holding: Number(holding[0].n) },
    oldestHeldAgeMs: oldestHeld,
    oldestPendingAgeMs: oldestPending,
    deadByReason,
    ignoredByType,
  };
}
