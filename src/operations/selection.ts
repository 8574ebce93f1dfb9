/** One selection for every operator surface, as one SQL condition: a dry run counts what the action acts on. */
import { type RawBuilder, sql } from 'kysely';
import { toNumber } from '../db/column-readers.js';
import { parseDuration } from '../duration.js';
import { durationMs, msAgo, type OperationsContext, scoped, sourceIs, table } from './context.js';

/** Which dead letters; every field narrows. Times: a `Date`, ISO 8601, `10:00` (today, UTC) or `2h` ago. */
export interface Selection {
  source?: string;
  /** `poison`, `late` or `rejected`. */
  reason?: string;
  /** A failed run's fingerprint, as `deadGroups` (`webhook-inbox dead groups`) lists it. */
  cause?: string;
  /** One key, or with a trailing `*` every key that starts with what precedes it (`acct_*`). */
  key?: string;
  type?: string;
  /** Failed at or after this time; a late one counts from its arrival. */
  since?: Date | string;
  until?: Date | string;
  /** Received longer ago than this (ms or a duration string). */
  olderThan?: number | string;
  newerThan?: number | string;
  ids?: readonly string[];
  /** Only ordered dead letters at their key's cursor: those a skip moves past. @defaultValue false */
  atCursor?: boolean;
}

const CLOCK = /^(\d{2}):(\d{2})(?::(\d{2}))?$/;
const ISO = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

/** A time as an operator types it: ISO 8601 (UTC without an offset), `HH:MM[:SS]` today in UTC, or `2h` ago. */
export function parseInstant(value: Date | string, now: Date = new Date()): Date | undefined {
  if (value instanceof Date) return Number.isFinite(value.getTime()) ? value : undefined;
  const text = value.trim();
  const ago = parseDuration(text);
  if (ago !== undefined) return new Date(now.getTime() - ago);
  const clock = CLOCK.exec(text);
  if (clock) {
    const [h, m, s] = [Number(clock[1]), Number(clock[2]), Number(clock[3] ?? 0)];
    if (h > 23 || m > 59 || s > 59) return undefined;
    const day = new Date(now);
    day.setUTCHours(h, m, s, 0);
    return day;
  }
  if (!ISO.test(text)) return undefined;
  const utc = /[zZ]|[+-]\d{2}:?\d{2}$/.test(text) || !text.includes(':') ? text : `${text}Z`;
  const at = new Date(utc.replace(' ', 'T'));
  return Number.isFinite(at.getTime()) ? at : undefined;
}

/** A selection with its times pinned, so that every batch (and the dry run) means the same rows. */
export interface PinnedSelection extends Omit<Selection, 'since' | 'until'> {
  readonly since?: Date;
  readonly until?: Date;
}

export function pinSelection(selection: Selection, now: Date = new Date()): PinnedSelection {
  const pin = (name: 'since' | 'until'): Date | undefined => {
    const value = selection[name];
    if (value === undefined) return undefined;
    const at = parseInstant(value, now);
    if (!at) {
      throw new TypeError(
        `webhook-inbox: \`${name}\` must be an ISO 8601 time (2026-11-28T10:00:00Z), a time of today in UTC (10:00) or a duration ago (2h); got ${JSON.stringify(String(value))}`,
      );
    }
    return at;
  };
  const pinned = { ...selection, since: pin('since'), until: pin('until') };
  if (pinned.since && pinned.until && pinned.since >= pinned.until) {
    throw new TypeError('webhook-inbox: `since` must be before `until`');
  }
  if (selection.olderThan !== undefined) durationMs('olderThan', selection.olderThan);
  if (selection.newerThan !== undefined) durationMs('newerThan', selection.newerThan);
  return pinned;
}

/** When a dead letter failed: its last failed run, or (late: it never ran) its arrival. */
export const FAILED_AT = sql`coalesce(e.failed_at, e.received_at)`;

export function deadWhere(ctx: OperationsContext, s: PinnedSelection): RawBuilder<unknown> {
  const conditions: RawBuilder<unknown>[] = [
    sql`e.status = 'dead'`,
    sourceIs('e.source', scoped(ctx, s.source)),
  ];
  if (s.key !== undefined) {
    if (s.key.endsWith('*')) {
      const prefix = s.key.slice(0, -1).replace(/[\\%_]/g, (c) => `\\${c}`);
      conditions.push(sql`e.key like ${`${prefix}%`}`);
    } else conditions.push(sql`e.key = ${s.key}`);
  }
  if (s.reason !== undefined) conditions.push(sql`e.dead_reason = ${s.reason}`);
  if (s.cause !== undefined) conditions.push(sql`e.cause = ${s.cause}`);
  if (s.type !== undefined) conditions.push(sql`e.type = ${s.type}`);
  if (s.since !== undefined) conditions.push(sql`${FAILED_AT} >= ${s.since}`);
  if (s.until !== undefined) conditions.push(sql`${FAILED_AT} < ${s.until}`);
  if (s.olderThan !== undefined) {
    conditions.push(sql`e.received_at < ${msAgo(durationMs('olderThan', s.olderThan))}`);
  }
  if (s.newerThan !== undefined) {
    conditions.push(sql`e.received_at >= ${msAgo(durationMs('newerThan', s.newerThan))}`);
  }
  if (s.atCursor) {
    conditions.push(sql`exists (select 1 from ${table(ctx, 'keys')} k
                                 where k.source = e.source and k.key = e.key and k.next_seq = e.seq)`);
  }
  if (s.ids !== undefined) {
    conditions.push(s.ids.length ? sql`e.id in (${sql.join(s.ids.map((id) => sql`${id}`))})` : sql`false`);
  }
  return sql.join(conditions, sql` and `);
}

export async function countDead(ctx: OperationsContext, s: PinnedSelection): Promise<number> {
  const { rows } = await sql<{ n: string | number }>`
    select count(*) as n from ${table(ctx, 'events')} e where ${deadWhere(ctx, s)}`.execute(ctx.db);
  return Number(rows[0]?.n ?? 0);
}

export interface BatchRef {
  readonly source: string;
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
}

/** Bulk actions' order: unordered events first, then keys by name, seqs in order; unique, so batches resume. */
export const KEY_ORDER = sql`coalesce(e.key, ''), coalesce(e.seq, 0), e.received_at, e.source, e.id`;

/** Matching dead letters in key order, each batch read from where the previous one ended, after it was handled. */
export async function* eachBatch(
  ctx: OperationsContext,
  s: PinnedSelection,
  size: number,
): AsyncGenerator<BatchRef[]> {
  let after: RawBuilder<unknown> = sql`true`;
  for (;;) {
    const { rows } = await sql<any>`
      select e.source, e.id, e.key, e.seq, e.received_at::text as received_at from ${table(ctx, 'events')} e
       where ${deadWhere(ctx, s)} and ${after}
       order by ${KEY_ORDER} limit ${size}`.execute(ctx.db);
    if (rows.length === 0) return;
    yield rows.map((r) => ({ source: r.source, id: r.id, key: r.key ?? null, seq: toNumber(r.seq) }));
    if (rows.length < size) return;
    const last = rows[rows.length - 1];
    // The timestamp as text: a Date would lose its microseconds, and the last row be met again.
    after = sql`(${KEY_ORDER}) > (${last.key ?? ''}, ${last.seq ?? 0}::bigint, ${last.received_at}::timestamptz, ${last.source}, ${last.id})`;
  }
}
