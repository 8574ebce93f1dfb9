/** Replay: a re-queue, never a bypass; drains and sweeps apply the event again, in seq order. */
import { type RawBuilder, sql } from 'kysely';
import { toNumber } from '../db/column-readers.js';
import type { StoredEvent } from '../db/sql/inspect.js';
import { streamOf } from '../db/sql/tables.js';
import { OperationError } from '../errors.js';
import {
  batchSizeOf,
  boundedLockWait,
  eventIn,
  type FoundEvent,
  findEvent,
  type LockWaitOptions,
  MAX_LIST,
  type OperationsContext,
  scoped,
  table,
} from './context.js';
import type { DeadLetterFilter } from './dead-letters.js';
import { eachBatch, pinSelection } from './selection.js';

/** Ids (each with its source, or in the operations' own), or every dead letter a filter matches (`all: true`). */
export type ReplaySelection =
  | string
  | readonly (string | { readonly id: string; readonly source: string })[]
  | (DeadLetterFilter & { all: true });

export interface ReplayOptions extends LockWaitOptions {
  /** Decide every outcome and change nothing (`requeued`: would be re-queued). @defaultValue false */
  dryRun?: boolean;
  /** A filter's dead letters are read this many at a time, in key order. @defaultValue 100 */
  batchSize?: number;
  /** After each batch of a filter's replay, for progress. */
  onBatch?(results: readonly ReplayResult[]): void;
}

export interface ReplayResult {
  readonly source: string | null;
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** `behind-cursor`: its key moved past its seq; `ambiguous`: the id is in several sources. */
  readonly outcome: 'requeued' | 'not-found' | 'not-dead' | 'behind-cursor' | 'ambiguous';
  /** The event's status after the action (from `inbox.replay`, after the drain). */
  status: StoredEvent['status'] | null;
}

export async function replay(
  ctx: OperationsContext,
  selection: ReplaySelection,
  options: ReplayOptions = {},
): Promise<ReplayResult[]> {
  if (typeof selection !== 'string' && !Array.isArray(selection)) {
    const filter = selection as DeadLetterFilter & { all: true };
    if (filter.all !== true)
      throw new TypeError('webhook-inbox: replay needs ids, or a filter with `all: true`');
    return replayMatching(ctx, filter, options);
  }
  const results: ReplayResult[] = [];
  for (const target of typeof selection === 'string' ? [selection] : selection) {
    const { id, source } = typeof target === 'string' ? { id: target, source: ctx.source } : target;
    results.push(await replayOne(ctx, id, source, options));
  }
  return results;
}

async function replayMatching(
  ctx: OperationsContext,
  filter: DeadLetterFilter,
  options: ReplayOptions,
): Promise<ReplayResult[]> {
  const pinned = pinSelection(filter);
  const size = batchSizeOf(options.batchSize, 100, MAX_LIST);
  const most = filter.limit ?? Number.POSITIVE_INFINITY;
  const results: ReplayResult[] = [];
  for await (const batch of eachBatch(ctx, pinned, size)) {
    const done: ReplayResult[] = [];
    for (const target of batch.slice(0, most - results.length)) {
      done.push(await replayOne(ctx, target.id, target.source, options));
    }
    results.push(...done);
    options.onBatch?.(done);
    if (results.length >= most) break;
  }
  return results;
}

/** Waits for the key row: under SKIP LOCKED, a key a delivery holds would look missing and stay blocked. */
async function replayOne(
  ctx: OperationsContext,
  id: string,
  source: string | undefined,
  options: ReplayOptions,
): Promise<ReplayResult> {
  let found: FoundEvent;
  try {
    found = await findEvent(ctx, id, source);
  } catch (err) {
    if (!(err instanceof OperationError)) throw err;
    const outcome = err.code === 'ambiguous' ? 'ambiguous' : 'not-found';
    return { source: source ?? null, id, key: null, seq: null, outcome, status: null };
  }
  const dryRun = options.dryRun === true;
  const { key, seq } = found;
  const base = { source: found.source, id, key, seq };
  const events = table(ctx, 'events');
  const keys = table(ctx, 'keys');
  const locked = {
    subject: eventIn(id, found.source),
    verb: 'replayed',
    held: key === null ? 'its row' : `key ${JSON.stringify(key)}`,
  };
  return boundedLockWait(ctx, options, locked, async (tx): Promise<ReplayResult> => {
    let next: number | null = null;
    let blockedHere = false;
    if (key !== null) {
      const cursor = () =>
        sql<any>`
        select next_seq, state, blocked_seq from ${keys}
         where source = ${found.source} and stream = ${streamOf(key)} and key = ${key} ${dryRun ? sql`` : sql`for update`}`.execute(
          tx,
        );
      let { rows } = await cursor();
      if (!rows[0] && !dryRun) {
        // No cursor yet (the key's only event died first): start it at this seq.
        await sql`insert into ${keys} (source, key, next_seq, stream)
                  values (${found.source}, ${key}, ${seq}, ${streamOf(key)})
                  on conflict do nothing`.execute(tx);
        ({ rows } = await cursor());
      }
      next = rows[0] ? toNumber(rows[0].next_seq) : seq;
      blockedHere = rows[0]?.state === 'blocked' && toNumber(rows[0].blocked_seq) === seq;
    }
    // Holding the key, never wait for an event row: a locked one is being applied, so not dead.
    const statusOf = (lock: RawBuilder<unknown>) =>
      sql<any>`select status from ${events} where source = ${found.source} and stream = ${streamOf(key, id)} and id = ${id} ${lock}`.execute(
        tx,
      );
    let { rows } = await statusOf(dryRun ? sql`` : sql`for update skip locked`);
    if (!rows[0] && !dryRun) ({ rows } = await statusOf(sql``));
    const status = rows[0]?.status ?? null;
    if (status !== 'dead') return { ...base, outcome: status ? 'not-dead' : 'not-found', status };
    if (key !== null && seq! < next!) return { ...base, outcome: 'behind-cursor', status };
    if (dryRun) return { ...base, outcome: 'requeued', status };
    const waiting = key === null ? 'pending' : 'held';
    await sql`
      update ${events}
         set status = ${waiting}, attempts = 0, dead_reason = null,
             run_after = ${key === null ? sql`now()` : sql`null`}
       where source = ${found.source} and stream = ${streamOf(key, id)} and id = ${id}`.execute(tx);
    if (blockedHere) {
      await sql`
        update ${keys}
           set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
         where source = ${found.source} and stream = ${streamOf(key)} and key = ${key}`.execute(tx);
    }
    return { ...base, outcome: 'requeued', status: waiting };
  });
}

export async function statuses(
  ctx: OperationsContext,
  source: string,
  ids: readonly string[],
): Promise<Map<string, StoredEvent['status']>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql<any>`
    select id, status from ${table(ctx, 'events')}
     where source = ${scoped(ctx, source) ?? source} and id in (${sql.join(ids.map((id) => sql`${id}`))})`.execute(
    ctx.db,
  );
  return new Map(rows.map((r) => [r.id, r.status]));
}
