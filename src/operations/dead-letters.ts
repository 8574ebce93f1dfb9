import { type RawBuilder, sql } from 'kysely';
import { toBoolean, toDate } from '../db/column-readers.js';
import { type StoredEvent, toStoredEvent } from '../db/sql/inspect.js';
import { secretHeaderSet, storableHeaders } from '../delivery/payload.js';
import { ageMs, findEvent, limitOf, MAX_LIST, type OperationsContext, table } from './context.js';
import { deadWhere, FAILED_AT, KEY_ORDER, pinSelection, type Selection } from './selection.js';

/** Why an event is dead: what `deadReason` holds and `--reason` accepts. */
export const DEAD_REASONS = Object.freeze(['poison', 'late', 'rejected'] as const);

/** A dead-lettered event, as an operator sees it. */
export interface DeadLetter extends StoredEvent {
  readonly source: string;
  /** `poison` (failed `maxAttempts` times), `late` (its seq was skipped) or `rejected` (RejectEvent). */
  readonly deadReason: string | null;
  readonly blocking: boolean;
  readonly ageMs: number;
}

/** A selection, and how many. */
export interface DeadLetterFilter extends Selection {
  /** At most this many. @defaultValue 100 */
  limit?: number;
  /** `received`: oldest first; `key`: as bulk actions go. @defaultValue 'received' */
  order?: 'received' | 'key';
}

/** Dead letters of one cause and reason, as `webhook-inbox dead groups` lists them. */
export interface DeadLetterGroup {
  /** The failed runs' fingerprint (null for late events, which never ran). */
  readonly cause: string | null;
  readonly reason: string | null;
  readonly count: number;
  readonly firstAt: Date;
  readonly lastAt: Date;
  readonly keys: number;
  readonly sample: { readonly source: string; readonly id: string; readonly error: string | null };
}

function selectDead(ctx: OperationsContext, where: RawBuilder<unknown>) {
  return sql<any>`
    select e.*, e.result::text as result_text, (k.state = 'blocked' and k.blocked_seq = e.seq) as blocking,
           extract(epoch from (now() - e.received_at)) * 1000 as age_ms
      from ${table(ctx, 'events')} e
      left join ${table(ctx, 'keys')} k on k.source = e.source and k.key = e.key
     where ${where}`;
}

// A secret header a row stored before still holds is not shown.
function toDeadLetter(ctx: OperationsContext, r: any): DeadLetter {
  const event = toStoredEvent(r);
  const headers = event.headers && storableHeaders(event.headers, ctx.secretHeaders ?? secretHeaderSet());
  return { ...event, headers, source: r.source, blocking: toBoolean(r.blocking), ageMs: ageMs(r.age_ms)! };
}

export async function deadLetters(
  ctx: OperationsContext,
  filter: DeadLetterFilter = {},
): Promise<DeadLetter[]> {
  const { rows } = await sql<any>`
    ${selectDead(ctx, deadWhere(ctx, pinSelection(filter)))}
     order by ${filter.order === 'key' ? KEY_ORDER : sql`e.received_at, e.source, e.id`}
     limit ${limitOf(filter.limit, 100)}`.execute(ctx.db);
  return rows.map((r) => toDeadLetter(ctx, r));
}

export async function deadGroups(
  ctx: OperationsContext,
  selection: Selection = {},
): Promise<DeadLetterGroup[]> {
  const { rows } = await sql<any>`
    select e.cause, e.dead_reason, count(*) as n, min(${FAILED_AT}) as first_at, max(${FAILED_AT}) as last_at,
           count(distinct e.key) as keys,
           (array_agg(e.source order by ${FAILED_AT} desc, e.id))[1] as sample_source,
           (array_agg(e.id order by ${FAILED_AT} desc, e.id))[1] as sample_id,
           (array_agg(e.last_error order by ${FAILED_AT} desc, e.id))[1] as sample_error
      from ${table(ctx, 'events')} e
     where ${deadWhere(ctx, pinSelection(selection))}
     group by e.cause, e.dead_reason
     order by count(*) desc, max(${FAILED_AT}) desc
     limit ${MAX_LIST}`.execute(ctx.db);
  return rows.map((r) => ({
    cause: r.cause ?? null,
    reason: r.dead_reason ?? null,
    count: Number(r.n),
    firstAt: toDate(r.first_at),
    lastAt: toDate(r.last_at),
    keys: Number(r.keys),
    sample: { source: r.sample_source, id: r.sample_id, error: r.sample_error ?? null },
  }));
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
