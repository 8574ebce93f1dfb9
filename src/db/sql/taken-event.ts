import { fromJsonText, toBytes, toDate, toNumber } from '../column-readers.js';

/**
 * An event taken to be applied now, whichever step took it: the claim of a delivery applied
 * inline, or `take_next`, `take_pending` and `take_turn` for a stored one. The one shape the
 * apply path (src/apply/apply.ts) works on.
 */
export interface TakenEvent {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** The body's hash (what `fail` compares a delivery against). */
  readonly hash: string;
  /** The raw body: what a failure stores, so that the event can be retried without the sender. */
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
   * A new event a claim took inline: no row yet (the id's advisory lock holds it, which every
   * claim of the id takes, and, ordered in its turn, its key row too). The apply path inserts the row with its result at COMMIT (src/db/sql/record-applied.ts);
   * if the handler fails, `fail` inserts it as waiting.
   */
  readonly rowAtCommit?: boolean;
  /**
   * A stored event `take_next`, `take_pending` or `take_turn` took and locked without marking
   * it: its row is still waiting (`held` or `pending`) until the apply path marks it processed
   * with its result, in one UPDATE riding on COMMIT (src/db/sql/mark-applied.ts).
   */
  readonly markAtCommit?: boolean;
}

/** The columns `take_next`, `take_pending` and `take_turn` return. */
export interface StoredEventRow {
  id: string;
  seq?: unknown;
  body_hash: string;
  payload: Uint8Array | null;
  /** jsonb read back as text by the take's statement (src/db/sql/tables.ts, `fromJsonText`). */
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
 * PL/pgSQL shared by take_next, take_pending and take_turn: sets the function's output row from
 * the locked row `v_ev`. The row itself is left as it is, still waiting: the apply path marks it
 * processed, with its result, in one UPDATE riding on COMMIT (src/db/sql/mark-applied.ts), so
 * that the row is written once. Nothing else can tell: other transactions see only committed
 * state, and mark and handler commit together or not at all; the row's lock, which keeps every
 * other taker and claim away, is the take's FOR UPDATE.
 */
export const TAKEN_EVENT_OUTPUT = `id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;`;
