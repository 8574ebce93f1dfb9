/** Retention: processed and ignored rows past their age (`retention`), and selected dead letters. */
import { sql } from 'kysely';
import {
  batchSizeOf,
  batchTaking,
  durationMs,
  eachSource,
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
  /**
   * The largest batch: rows deleted per statement (each batch is its own short transaction).
   * The first batch deletes at most 1,000 (or this, when smaller); each full batch doubles the
   * next, up to this, so a prune that finds a backlog soon deletes it at this size.
   * @defaultValue 10000
   */
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
  /** Processed before this instant. */
  readonly cutoff: Date;
  /** Stopped by `maxBatches` or `maxMs` after a full batch: rows past the cutoff may be left. */
  readonly behind: boolean;
}

const FIRST_BATCH = 1000;

/** Deletes processed and ignored rows older than `olderThan`, in batches (see Operations.prune). */
export async function prune(ctx: OperationsContext, options: PruneOptions): Promise<PruneResult> {
  const ms = durationMs('olderThan', options.olderThan);
  const source = scoped(ctx, options.source);
  const largest = batchSizeOf(options.batchSize, 10_000);
  if (options.maxMs !== undefined && !(Number.isFinite(options.maxMs) && options.maxMs >= 0)) {
    throw new TypeError(`webhook-inbox: \`maxMs\` must be a number of ms, 0 or more; got ${options.maxMs}`);
  }
  const until = options.maxMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.maxMs;
  const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
  const events = table(ctx, 'events');
  // One cutoff for every batch, so a long prune does not chase rows processed while it runs.
  const { rows: now } =
    await sql<any>`select now() - ${ms}::bigint * interval '1 millisecond' as cutoff`.execute(ctx.db);
  const cutoff = new Date(now[0].cutoff);
  let pruned = 0;
  let behind = false;
  // Source by source: the indexes on processed_at are keyed by source first.
  const sources = await eachSource(ctx, source);
  // Processed rows, then ignored ones (kept as long: a sender's retry must still find one), each by
  // its own statement, so that each uses its own partial index.
  for (const from of sources) {
    for (const status of ['processed', 'ignored']) {
      const old = sql`e.status = ${sql.lit(status)} and e.source = ${from} and e.processed_at < ${cutoff}`;
      if (options.dryRun) {
        const { rows } = await sql<any>`select count(*) as n from ${events} e where ${old}`.execute(ctx.db);
        pruned += Number(rows[0].n);
        continue;
      }
      let batch = Math.min(FIRST_BATCH, largest);
      for (let batches = 0; ; batches++) {
        if (batches >= maxBatches || Date.now() >= until) {
          behind = true;
          break;
        }
        const { lock, recheck } = await batchTaking(ctx, old);
        const result = await sql`
          delete from ${events} e
           where (e.source, e.stream, e.id) in (select e.source, e.stream, e.id from ${events} e where ${old}
                                                 limit ${batch} ${lock}) ${recheck}`.execute(ctx.db);
        const n = Number(result.numAffectedRows ?? 0n);
        pruned += n;
        if (n < batch) break;
        batch = Math.min(batch * 2, largest);
      }
    }
  }
  return { pruned, dryRun: options.dryRun === true, cutoff, behind };
}

export interface PurgeOptions {
  /** Count (and sample) what would be purged; delete nothing. @defaultValue false */
  dryRun?: boolean;
  /** Rows deleted per statement (each batch its own short transaction). @defaultValue 1000 */
  batchSize?: number;
  /** Stop after this many batches (the sweeper purges one per turn). @defaultValue unlimited */
  maxBatches?: number;
}

export interface PurgeResult {
  /** Dead letters deleted, or with `dryRun` those that would be. */
  readonly purged: number;
  /** Matching dead letters left because each blocks its key: skip (or replay) them first. */
  readonly blocking: number;
  readonly dryRun: boolean;
}

/**
 * Deletes the dead letters a selection matches (their payloads with them), in batches. One that
 * blocks its key is never deleted (the key would stay blocked with nothing to replay). Gaps and keys
 * are kept, so a late copy of a purged event is still refused as late.
 */
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
  let purged = 0;
  for (let batches = 0; batches < (options.maxBatches ?? Number.POSITIVE_INFINITY); batches++) {
    const { lock, recheck } = await batchTaking(ctx, sql`${matches} and not ${blocks}`);
    const result = await sql`
      delete from ${events} e
       where (e.source, e.stream, e.id) in (select e.source, e.stream, e.id from ${events} e
                                             where ${matches} and not ${blocks} limit ${batch} ${lock})
         ${recheck}`.execute(ctx.db);
    const n = Number(result.numAffectedRows ?? 0n);
    purged += n;
    if (n < batch) break;
  }
  return { purged, blocking, dryRun: false };
}
