/** Retention: processed and ignored rows past their age (`retention`), and selected dead letters. */
import { type RawBuilder, sql } from 'kysely';
import {
  batchSizeOf,
  batchTaking,
  durationMs,
  eachSource,
  msAgo,
  type OperationsContext,
  scoped,
  table,
} from './context.js';
import { deadWhere, pinSelection, type Selection } from './selection.js';

export interface PruneOptions {
  /** Processed longer ago than this (ms or a duration string). */
  olderThan: number | string;
  /** Count what would be pruned; delete nothing. @defaultValue false */
  dryRun?: boolean;
  source?: string;
  /** The largest batch deleted per statement: batches double from 1,000 up to this. @defaultValue 10000 */
  batchSize?: number;
  /** Stop after this many batches of each status. @defaultValue unlimited */
  maxBatches?: number;
  /** Start no batch after this many ms (the sweeper bounds each pass so). @defaultValue unlimited */
  maxMs?: number;
}

export interface PruneResult {
  /** Rows deleted, or with `dryRun` rows that would be. */
  readonly pruned: number;
  readonly dryRun: boolean;
  readonly cutoff: Date;
  /** Stopped by `maxBatches` or `maxMs` after a full batch: rows past the cutoff may be left. */
  readonly behind: boolean;
}

const FIRST_BATCH = 1000;

export async function prune(ctx: OperationsContext, options: PruneOptions): Promise<PruneResult> {
  const ms = durationMs('olderThan', options.olderThan);
  const source = scoped(ctx, options.source);
  const largest = batchSizeOf(options.batchSize, 10_000);
  const first = Math.min(FIRST_BATCH, largest);
  if (options.maxMs !== undefined && !(Number.isFinite(options.maxMs) && options.maxMs >= 0)) {
    throw new TypeError(`webhook-inbox: \`maxMs\` must be a number of ms, 0 or more; got ${options.maxMs}`);
  }
  const until = options.maxMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.maxMs;
  const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
  // One cutoff for every batch, so a long prune does not chase rows processed while it runs.
  const { rows: now } = await sql<any>`select ${msAgo(ms)} as cutoff`.execute(ctx.db);
  const cutoff = new Date(now[0].cutoff);
  let pruned = 0;
  let behind = false;
  // Per source and status, each statement on its partial index; ignored rows are kept as long as processed.
  for (const from of await eachSource(ctx, source)) {
    for (const status of ['processed', 'ignored']) {
      const old = sql`e.status = ${sql.lit(status)} and e.source = ${from} and e.processed_at < ${cutoff}`;
      if (options.dryRun) {
        const { rows } =
          await sql<any>`select count(*) as n from ${table(ctx, 'events')} e where ${old}`.execute(ctx.db);
        pruned += Number(rows[0].n);
        continue;
      }
      const done = await deleteInBatches(ctx, old, first, largest, maxBatches, until);
      pruned += done.deleted;
      behind ||= done.behind;
    }
  }
  return { pruned, dryRun: options.dryRun === true, cutoff, behind };
}

/** Each full batch doubles the next, up to `largest`; SKIP LOCKED, as every instance's sweeper prunes. */
async function deleteInBatches(
  ctx: OperationsContext,
  where: RawBuilder<unknown>,
  batch: number,
  largest: number,
  maxBatches: number,
  until = Number.POSITIVE_INFINITY,
): Promise<{ deleted: number; behind: boolean }> {
  const events = table(ctx, 'events');
  let deleted = 0;
  for (let batches = 0; ; batches++) {
    if (batches >= maxBatches || Date.now() >= until) return { deleted, behind: true };
    const { lock, recheck } = await batchTaking(ctx, where);
    const result = await sql`
      delete from ${events} e
       where (e.source, e.stream, e.id) in (select e.source, e.stream, e.id from ${events} e where ${where}
                                             limit ${batch} ${lock}) ${recheck}`.execute(ctx.db);
    const n = Number(result.numAffectedRows ?? 0n);
    deleted += n;
    if (n < batch) return { deleted, behind: false };
    batch = Math.min(batch * 2, largest);
  }
}

export interface PurgeOptions {
  /** Count (and sample) what would be purged; delete nothing. @defaultValue false */
  dryRun?: boolean;
  /** Rows deleted per statement. @defaultValue 1000 */
  batchSize?: number;
  /** Stop after this many batches (the sweeper purges one per turn). @defaultValue unlimited */
  maxBatches?: number;
}

export interface PurgeResult {
  /** Dead letters deleted, or with `dryRun` those that would be. */
  readonly purged: number;
  /** Matching dead letters left because each blocks its key. */
  readonly blocking: number;
  readonly dryRun: boolean;
}

// One that blocks its key is never deleted; gaps and keys stay, so a late copy is still refused as late.
export async function purgeDead(
  ctx: OperationsContext,
  selection: Selection,
  options: PurgeOptions = {},
): Promise<PurgeResult> {
  const batch = batchSizeOf(options.batchSize, 1000);
  const events = table(ctx, 'events');
  const matches = deadWhere(ctx, pinSelection(selection));
  const blocks = sql`exists (select 1 from ${table(ctx, 'keys')} k where k.source = e.source and k.key = e.key
                              and k.state = 'blocked' and k.blocked_seq = e.seq)`;
  const { rows } = await sql<any>`select count(*) filter (where ${blocks}) as blocking,
                                         count(*) filter (where not ${blocks}) as purgeable
                                    from ${events} e where ${matches}`.execute(ctx.db);
  const blocking = Number(rows[0]?.blocking ?? 0);
  if (options.dryRun) return { purged: Number(rows[0]?.purgeable ?? 0), blocking, dryRun: true };
  const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
  const { deleted } = await deleteInBatches(ctx, sql`${matches} and not ${blocks}`, batch, batch, maxBatches);
  return { purged: deleted, blocking, dryRun: false };
}
