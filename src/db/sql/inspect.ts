import { sql } from 'kysely';
import { fromJsonText, toBytes, toDate, toNumber } from '../column-readers.js';
import type { Queryable, Tables } from './tables.js';

export interface KeyState {
  key: string;
  /** The seq the key waits for. */
  nextSeq: number;
  state: 'open' | 'blocked';
  blockedSeq: number | null;
  blockedReason: 'gap' | 'poison' | null;
  /** Seqs of the events buffered for this key (held, or pending in deferred mode), ascending. */
  heldSeqs: number[];
  /** Age of the oldest buffered event, in ms, or null when none is held. */
  oldestHeldAgeMs: number | null;
  updatedAt: Date;
}

export interface StoredEvent {
  id: string;
  key: string | null;
  seq: number | null;
  status: 'pending' | 'held' | 'processed' | 'dead' | 'ignored';
  type: string | null;
  attempts: number;
  lastError: string | null;
  deadReason: string | null;
  /** The last failed run's fingerprint (src/apply/cause.ts), and when it failed. */
  cause: string | null;
  failedAt: Date | null;
  /** When a waiting event is due (a failed run's backoff, or RetryLater's time); null when due now. */
  retryAt: Date | null;
  receivedAt: Date;
  processedAt: Date | null;
  payload: Buffer | null;
  headers: Record<string, string> | null;
  result: unknown;
}

/** A row of the events table with its result again as text, `result_text`, as a pool's parsers make it. */
export interface StoredEventColumns {
  id: string;
  key: string | null;
  seq: unknown;
  status: StoredEvent['status'];
  type?: string | null;
  attempts: unknown;
  last_error: string | null;
  dead_reason: string | null;
  cause?: string | null;
  failed_at?: unknown;
  run_after: unknown;
  received_at: unknown;
  processed_at: unknown;
  payload: unknown;
  headers: Record<string, string> | string | null;
  result_text: string | null;
}

/** A row of the events table as the operator's views show it. */
export function toStoredEvent(r: StoredEventColumns): StoredEvent {
  // A query that forgot it would show every result as null, silently.
  if (!('result_text' in r))
    throw new Error('webhook-inbox: an events query must select result::text as result_text');
  return {
    id: r.id,
    key: r.key,
    seq: toNumber(r.seq),
    status: r.status,
    type: r.type ?? null,
    attempts: toNumber(r.attempts) ?? 0,
    lastError: r.last_error,
    deadReason: r.dead_reason,
    cause: r.cause ?? null,
    failedAt: r.failed_at ? toDate(r.failed_at) : null,
    retryAt: r.run_after && (r.status === 'pending' || r.status === 'held') ? toDate(r.run_after) : null,
    receivedAt: toDate(r.received_at),
    processedAt: r.processed_at ? toDate(r.processed_at) : null,
    payload: r.payload ? toBytes(r.payload) : null,
    headers: typeof r.headers === 'string' ? JSON.parse(r.headers) : (r.headers ?? null),
    result: fromJsonText(r.result_text),
  };
}

interface KeyColumns {
  next_seq: unknown;
  state: KeyState['state'];
  blocked_seq: unknown;
  blocked_reason: KeyState['blockedReason'];
  updated_at: unknown;
}

export async function keyState(
  db: Queryable,
  t: Tables,
  source: string,
  key: string,
): Promise<KeyState | undefined> {
  const {
    rows: [k],
  } = await sql<KeyColumns>`
    select next_seq, state, blocked_seq, blocked_reason, updated_at
      from ${sql.raw(t.keys)} where source = ${source} and key = ${key}`.execute(db);
  if (!k) return undefined;
  const { rows: held } = await sql<{ seq: unknown; age_ms: unknown }>`
    select seq, extract(epoch from (now() - received_at)) * 1000 as age_ms
      from ${sql.raw(t.events)}
     where source = ${source} and key = ${key} and status in ('held', 'pending')
     order by seq`.execute(db);
  return {
    key,
    nextSeq: toNumber(k.next_seq)!,
    state: k.state,
    blockedSeq: toNumber(k.blocked_seq),
    blockedReason: k.blocked_reason,
    heldSeqs: held.map((h) => toNumber(h.seq)!),
    oldestHeldAgeMs: held.length ? Math.max(...held.map((h) => Math.round(Number(h.age_ms)))) : null,
    updatedAt: toDate(k.updated_at),
  };
}

export async function listEvents(
  db: Queryable,
  t: Tables,
  source: string,
  filter: { id?: string; key?: string; status?: StoredEvent['status']; limit?: number },
): Promise<StoredEvent[]> {
  const where = [sql`source = ${source}`];
  if (filter.id !== undefined) where.push(sql`id = ${filter.id}`);
  if (filter.key !== undefined) where.push(sql`key = ${filter.key}`);
  if (filter.status !== undefined) where.push(sql`status = ${filter.status}`);
  const { rows } = await sql<StoredEventColumns>`
    select *, result::text as result_text from ${sql.raw(t.events)}
     where ${sql.join(where, sql` and `)}
     order by key, seq, received_at
     limit ${filter.limit ?? 1000}`.execute(db);
  return rows.map(toStoredEvent);
}
