/** The dead-letter queue as an operator reads it: lists with filters, and one event in full. */
import { type RawBuilder, sql } from 'kysely';
import { toBoolean } from '../column-readers.js';
import { secretHeaderSet, storableHeaders } from '../payload.js';
import { type StoredEvent, toStoredEvent } from '../sql/inspect.js';
import {
  ageMs,
  durationMs,
  findEvent,
  limitOf,
  type OperationsContext,
  scoped,
  sourceIs,
  table,
} from './context.js';

/**
 * Why an event is dead: `poison` (the handler failed `maxAttempts` times), `late` (its seq
 * arrived after its key moved past it) or `rejected` (the handler threw RejectEvent). What
 * `deadReason` holds, and what `--reason` accepts.
 */
export const DEAD_REASONS = Object.freeze(['poison', 'late', 'rejected'] as const);

/** A dead-lettered event, as an operator sees it. */
export interface DeadLetter extends StoredEvent {
  readonly source: string;
  /** Why it is dead: `poison` (failed `maxAttempts` times), `late` (its seq was skipped) or `rejected` (RejectEvent). */
  readonly deadReason: string | null;
  /** Its key is blocked at its seq: later events of the key are held until it is replayed or skipped. */
  readonly blocking: boolean;
  /** Age since it was received, in ms. */
  readonly ageMs: number;
}

/** Narrows a list of dead letters. Ages are milliseconds or duration strings (`'1h'`, `'7d'`). */
export interface DeadLetterFilter {
  source?: string;
  key?: string;
  reason?: string;
  /** Received longer ago than this. */
  olderThan?: number | string;
  /** Received more recently than this. */
  newerThan?: number | string;
  /** At most this many, oldest first. @defaultValue 100 */
  limit?: number;
}

/** Events with what an operator sees beside them: whether each blocks its key, and its age. */
function selectDead(ctx: OperationsContext, where: RawBuilder<unknown>) {
  return sql<any>`
    select e.*, e.result::text as result_text, (k.state = 'blocked' and k.blocked_seq = e.seq) as blocking,
           extract(epoch from (now() - e.received_at)) * 1000 as age_ms
      from ${table(ctx, 'events')} e
      left join ${table(ctx, 'keys')} k on k.source = e.source and k.key = e.key
     where ${where}`;
}

/** A row as an operator sees it: a secret header a row stored before still holds is not shown. */
function toDeadLetter(ctx: OperationsContext, r: any): DeadLetter {
  const event = toStoredEvent(r);
  const headers = event.headers && storableHeaders(event.headers, ctx.secretHeaders ?? secretHeaderSet());
  return { ...event, headers, source: r.source, blocking: toBoolean(r.blocking), ageMs: ageMs(r.age_ms)! };
}

export async function deadLetters(
  ctx: OperationsContext,
  filter: DeadLetterFilter = {},
): Promise<DeadLetter[]> {
  const conditions: RawBuilder<unknown>[] = [
    sql`e.status = 'dead'`,
    sourceIs('e.source', scoped(ctx, filter.source)),
  ];
  if (filter.key !== undefined) conditions.push(sql`e.key = ${filter.key}`);
  if (filter.reason !== undefined) conditions.push(sql`e.dead_reason = ${filter.reason}`);
  if (filter.olderThan !== undefined) {
    const ms = durationMs('olderThan', filter.olderThan);
    conditions.push(sql`e.received_at < now() - ${ms}::bigint * interval '1 millisecond'`);
  }
  if (filter.newerThan !== undefined) {
    const ms = durationMs('newerThan', filter.newerThan);
    conditions.push(sql`e.received_at >= now() - ${ms}::bigint * interval '1 millisecond'`);
  }
  const { rows } = await sql<any>`
    ${selectDead(ctx, sql.join(conditions, sql` and `))}
     order by e.received_at, e.source, e.id
     limit ${limitOf(filter.limit, 100)}`.execute(ctx.db);
  return rows.map((r) => toDeadLetter(ctx, r));
}

export async function deadLetter(
  ctx: OperationsContext,
  id: string,
  source = ctx.source,
): Promise<DeadLetter> {
  const found = await findEvent(ctx, id, source);
  const { rows } = await selectDead(ctx, sql`e.source = ${found.source} and e.id = ${id}`).execute(ctx.db);
  return toDeadLetter(ctx, rows[0]);
}
