import { fromJsonText, toBytes, toDate, toNumber } from '../column-readers.js';

/** An event taken to be applied now, by a delivery's claim or by a take: what the apply path works on. */
export interface TakenEvent {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly hash: string;
  /** What a failure stores, so the event can be retried without the sender. */
  readonly payload: Buffer;
  readonly headers: Record<string, string>;
  readonly attempts: number;
  readonly receivedAt: Date;
  /** When the taker has it already (a delivery); else parsed from `payload`. */
  readonly body?: unknown;
  /** When the taker read it already (a delivery). */
  readonly type?: string | null;
  /** What it is again when its handler fails: `held` for an ordered event a drain took. */
  readonly waiting?: 'held' | 'pending';
  /** A new event a claim took inline: no row yet; inserted at COMMIT, or by `fail` as waiting. */
  readonly rowAtCommit?: boolean;
  /** A stored event a take locked without marking it: the apply path marks it at COMMIT. */
  readonly markAtCommit?: boolean;
  /** '' or absent: none. */
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

/** The takes' output row from `v_ev`, left waiting: mark-applied.ts writes it once at COMMIT. */
export const TAKEN_EVENT_OUTPUT = `id := v_ev.id;
  body_hash := v_ev.body_hash;
  payload := v_ev.payload;
  headers := v_ev.headers;
  attempts := v_ev.attempts;
  received_at := v_ev.received_at;`;
