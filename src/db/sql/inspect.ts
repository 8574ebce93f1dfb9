import { type Kysely, sql } from 'kysely';
import { fromJsonText, toBytes, toDate, toNumber } from '../column-readers.js';
import type { Tables } from './tables.js';

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
  /** The event's type, as recorded when it was applied or ignored (null before, or without one). */
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

function table(t: Tables, name: 'events' | 'keys' | 'gaps') {
  return `${t.prefix}${name}`;
}

/**
 * A row of the events table as the operator's views show it. Its query selects the result again
 * as text, `result_text` (src/db/sql/tables.ts, `fromJsonText`), whatever the pool's parsers make
 * of jsonb; headers are always an object, so text is parsed where a parser left it.
 */
export function toStoredEvent(r: any): StoredEvent {
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

export async function keyState(
  db: Kysely<any>,
  t: Tables,
  source: string,
  key: string,
): Promise<KeyState | undefined> {
  const k = await db
    .withSchema(t.schema)
    .selectFrom(table(t, 'keys'))
    .selectAll()
    .where('source', '=', source)
    .where('key', '=', key)
    .executeTakeFirst();
  if (!k) return undefined;
  const held = await db
    .withSchema(t.schema)
    .selectFrom(table(t, 'events'))
    .select(['seq', sql<number>`extract(epoch from (now() - received_at)) * 1000`.as('age_ms')])
    .where('source', '=', source)
    .where('key', '=', key)
    .where('status', 'in', ['held', 'pending'])
    .orderBy('seq')
    .execute();
  return {
    key,
    nextSeq: toNumber(k.next_seq)!,
    state: k.state,
    blockedSeq: toNumber(k.blocked_seq),
    blockedReason: k.blocked_reason,
    heldSeqs: held.map((h) => toNumber(h.seq)!),
    oldestHeldAgeMs: held.length ? Math.max(...held.map((h) => Math.round(Number(h.age_ms)))) : null,
    updatedAt: new Date(k.updated_at),
  };
}

export async function listEvents(
  db: Kysely<any>,
  t: Tables,
  source: string,
  filter: { id?: string; key?: string; status?: StoredEvent['status']; limit?: number },
): Promise<StoredEvent[]> {
  let q = db
    .withSchema(t.schema)
    .selectFrom(table(t, 'events'))
    .selectAll()
    .select(sql<string | null>`result::text`.as('result_text'))
    .where('source', '=', source);
  if (filter.id !== undefined) q = q.where('id', '=', filter.id);
  if (filter.key !== undefined) q = q.where('key', '=', filter.key);
  if (filter.status !== undefined) q = q.where('status', '=', filter.status);
  const rows = await q
    .orderBy('key')
    .orderBy('seq')
    .orderBy('received_at')
    .limit(filter.limit ?? 1000)
    .execute();
  return rows.map(toStoredEvent);
}
