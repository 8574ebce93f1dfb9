/** Readers of the columns our statements return, whatever the pool's type parsers made of them. */

/** A jsonb column read back as text (`::text`), so no global parser changes what a duplicate is answered. */
export function fromJsonText(text: unknown): unknown {
  return text === null || text === undefined ? null : JSON.parse(String(text));
}

/** int8: a string from pg, a bigint or number from PGlite, text from a pool that parses nothing. */
export function toNumber(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  return Number(value);
}

/** A boolean column: `true`, or PostgreSQL's text for it (`t`) from a pool that parses nothing. */
export function toBoolean(value: unknown): boolean {
  return value === true || value === 't';
}

/** A bytea column: bytes, or PostgreSQL's hex text (`\\x…`); null is no bytes. */
export function toBytes(value: unknown): Buffer {
  if (value === null || value === undefined) return Buffer.alloc(0);
  // Copied: an embedded database's bytes may be a view of memory it reuses.
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === 'string' && value.startsWith('\\x')) return Buffer.from(value.slice(2), 'hex');
  // bytea_output = escape, or a parser of the application's that made something else of it.
  throw new Error('webhook-inbox: a bytea column arrived as neither bytes nor hex text');
}

/** A timestamptz column: a Date, or its text, which Date parses (`2026-11-27 08:00:00.123+00`). */
export function toDate(value: unknown): Date {
  return value instanceof Date ? value : new Date(value as string);
}
