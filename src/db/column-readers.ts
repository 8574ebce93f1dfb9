/**
 * Readers of the columns our statements return, whatever the pool's type parsers made of them;
 * shared by the inbox's statements, its operator actions and the sender's outbox.
 */

/**
 * A jsonb column the statement read back as text (`::text`), parsed here. A pool's global type
 * parsers (`pg.types.setTypeParser(3802, …)`: the text itself, or another library's objects)
 * then never change what the inbox answers a duplicate with or hands a handler; a parser that
 * left jsonb as text made a duplicate's `result` a string. Null (SQL null, no row) is null.
 */
export function fromJsonText(text: unknown): unknown {
  return text === null || text === undefined ? null : JSON.parse(String(text));
}

/*
 * The readers below take a column as whatever the pool's type parsers made of it: pg's defaults,
 * PGlite's, or an application's own (`pg.types.setTypeParser`, a pool's `types`), down to a pool
 * that parses nothing and hands every column over as PostgreSQL's text. A boolean read with
 * `=== true` was false for the text 't': the try-claim never applied, and the claim's
 * `row_at_commit` read as false, so a new event's row was never written and a duplicate on
 * another instance ran its handler again (test/pool-type-parsers.test.ts).
 */

/** int8 arrives as a string from pg and as a bigint or number from PGlite; any number as text from a pool that parses nothing. */
export function toNumber(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  return Number(value);
}

/** A boolean column: `true`, or PostgreSQL's text for it (`t`) from a pool that parses nothing. */
export function toBoolean(value: unknown): boolean {
  return value === true || value === 't';
}

/** A bytea column: bytes, or PostgreSQL's hex text for them (`\\x…`) from a pool that parses nothing; null is no bytes. */
export function toBytes(value: unknown): Buffer {
  if (value === null || value === undefined) return Buffer.alloc(0);
  // Copied, as before: an embedded database's bytes may be a view of memory it reuses.
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === 'string' && value.startsWith('\\x')) return Buffer.from(value.slice(2), 'hex');
  // bytea_output = escape, or a parser of the application's that made something else of it.
  throw new Error('webhook-inbox: a bytea column arrived as neither bytes nor hex text');
}

/** A timestamptz column: a Date, or its text, which Date parses (`2026-11-27 08:00:00.123+00`). */
export function toDate(value: unknown): Date {
  return value instanceof Date ? value : new Date(value as string);
}
