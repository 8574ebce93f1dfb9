/**
 * The inbox's tables as Kysely table interfaces, for users who query them:
 * `new Kysely<MyDatabase & InboxDatabase>({ dialect })`.
 */
import type { ColumnType } from 'kysely';

/** A `bigint` column: pg returns a string, PGlite a number or a bigint. */
export type Int8 = ColumnType<string | number | bigint, string | number | bigint, string | number | bigint>;

/** One row per event (source, id): the dedup record, the reorder buffer and the dead letters. */
export interface InboxEventsTable {
  source: string;
  id: string;
  key: string | null;
  seq: Int8 | null;
  /** SHA-256 of the raw body, hex. */
  body_hash: string;
  /** `ignored`: no handler takes its type; final, as `processed` is. */
  status: 'pending' | 'held' | 'processed' | 'dead' | 'ignored';
  /** The raw body, kept while the event waits or is ignored (and after, with `keepPayload`). */
  payload: Buffer | null;
  headers: Record<string, string> | null;
  /** What the handler returned (JSON), replayed to duplicates. */
  result: unknown;
  attempts: number;
  last_error: string | null;
  dead_reason: 'poison' | 'late' | 'rejected' | null;
  run_after: Date | null;
  received_at: Date;
  processed_at: Date | null;
  type: string | null;
  /** The last failed run's fingerprint. */
  cause: string | null;
  /** When the last failed run was recorded (a dead letter's: when it died). */
  failed_at: Date | null;
  /** The key, else the id: the distribution column on Citus (docs/citus.md). */
  stream: string;
  /** '' for none. */
  group_key: string;
}

/** One row per ordering key: its cursor (`next_seq`) and whether it is blocked. */
export interface InboxKeysTable {
  source: string;
  key: string;
  next_seq: Int8;
  state: 'open' | 'blocked';
  blocked_seq: Int8 | null;
  blocked_reason: 'gap' | 'poison' | null;
  updated_at: Date;
  /** `order: { policy: 'latest' }`: the version last applied for this key. */
  last_version: Int8 | null;
  /** The key's stream (its key). */
  stream: string;
}

/** Seqs a key skipped (gap timeout, poison skip, operator skip): a late arrival is dead-lettered. */
export interface InboxGapsTable {
  source: string;
  key: string;
  from_seq: Int8;
  to_seq: Int8;
  reason: 'timeout' | 'skip' | 'poison';
  created_at: Date;
  /** The key's stream (its key). */
  stream: string;
}

/** The tables under their names for `schema` and `tablePrefix`: `InboxDatabase<'billing', 'wh_'>`. */
export type InboxDatabase<Schema extends string = 'webhook_inbox', Prefix extends string = ''> = {
  [T in `${Schema}.${Prefix}events`]: InboxEventsTable;
} & { [T in `${Schema}.${Prefix}keys`]: InboxKeysTable } & {
  [T in `${Schema}.${Prefix}gaps`]: InboxGapsTable;
};
