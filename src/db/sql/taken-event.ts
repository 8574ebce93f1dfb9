import { fromJsonText, toBytes, toDate, toNumber } from '../column-readers.js';

/** An event taken to be applied now, by a delivery's claim or by a take: what the apply path works on. */
export interface TakenEvent {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly hash: string;
  /** The raw body: what a failure stores, so the event can be retried without the sender. */
  readonly payload: Buffer;
  readonly headers: Record<string, string>;
  /** Failed runs so far. */
  readonly attempts: number;
  readonly receivedAt: Date;
  /** The parsed body when the taker has it already (a delivery); else parsed from `payload`. */
  readonly body?: unknown;
  /** The type when the taker read it already (a delivery); else read from `headers` and `payload`. */
  readonly type?: string | null;
  /** What it is again when its handler fails: `held` for an ordered event a drain took. */
  readonly waiting?: 'held' | 'pending';
  /**
   * A new event a claim took inline: no row yet (the id's lock, and its key row when ordered, hold
   * it); the apply path inserts it at COMMIT, or `fail` as waiting.
   */
  readonly rowAtCommit?: boolean;
  /** A stored event a take locked without marking it: the apply path marks it at COMMIT. */
  readonly markAtCommit?: boolean;
  /** Its group (option `groups`); '' or absent: none. */
  readonly group?: string;
}

/** The columns `take_next`, `take_pending` and `take_turn` return. */
export interface StoredEventRow {
  id: string;
  seq?: unknown;
  body_hash: string;
  payload: Uint8Array | null;
  headers: string | null;
  attempts: number;
  received_at: string | Date;
}

export function toTakenEvent(row: StoredEventRow, key: string | null, seq: number | null): TakenEvent {
  return {
    waiting: key === null ? 'pending' : 'held',
    markAtCommit: true,
    id: row.id,
    key,
    seq,
    hash: row.body_hash,
    payload: toBytes(row.payload),
    headers: (fromJsonText(row.headers) ?? {}) as Record<string, string>,
    attempts: toNumber(row.attempts) ?? 0,
    receivedAt: toDate(row.received_at),
  };
}

/**
 * PL/pgSQL shared by the takes: the output row from the locked row `v_ev`, which is left waiting.
 * The apply path marks it processed at COMMIT (src/db/sql/mark-applied.ts), so the row is written
 * once; no one can tell, since mark and handler commit together and the take's FOR UPDATE keeps
 * every other taker and claim away.
 */
export const TAKEN_EVENT_OUTPUT = `id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;`;
