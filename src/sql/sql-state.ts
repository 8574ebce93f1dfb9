/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
// 23505: a new event's row, inserted at COMMIT (src/sql/record-applied.ts), met one inserted
// by something that did not take the id's advisory lock (every claim takes it since migration
// 0008; an instance of an earlier version's functions would not): the last guard;
// the loser's retry then sees the row and answers from it (422, or a duplicate).
export const CONTENDED = new Set(['55P03', '40P01', '40001', '23505']);

/** The SQLSTATE of a Postgres error, or undefined for anything else (a socket error, a bug). */
export function sqlState(err: unknown): string | undefined {
  return err && typeof err === 'object' && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

/**
 * The inbox's tables or functions are not there (42P01 undefined_table, 42883
 * undefined_function, 3F000 invalid_schema_name): `migrate: false` and no `webhook-inbox
 * migrate` at deploy, or a role without the privileges to see them.
 */
export function missingTables(err: unknown): boolean {
  const state = sqlState(err);
  return state === '42P01' || state === '42883' || state === '3F000';
}
