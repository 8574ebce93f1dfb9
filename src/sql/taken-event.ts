/**
 * An event taken to be applied now, whichever step took it: the claim of a delivery applied
 * inline, or `take_next`, `take_pending` and `take_turn` for a stored one. The one shape the
 * apply path (src/apply.ts) works on.
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
}

/** The columns `take_next`, `take_pending` and `take_turn` return. */
export interface StoredEventRow {
  id: string;
  seq?: unknown;
  body_hash: string;
  payload: Uint8Array | null;
  headers: Record<string, string> | null;
  attempts: number;
  received_at: string | Date;
}

export function toTakenEvent(row: StoredEventRow, key: string | null, seq: number | null): TakenEvent {
  return {
    id: row.id,
    key,
    seq,
    hash: row.body_hash,
    payload: Buffer.from(row.payload ?? []),
    headers: row.headers ?? {},
    attempts: row.attempts,
    receivedAt: new Date(row.received_at),
  };
}
