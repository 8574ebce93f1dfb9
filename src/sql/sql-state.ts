/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
// 23505: two deliveries of one id under different keys raced past the claim's existence
// check (each key has its own lock), or a new event's row, inserted at COMMIT
// (src/sql/record-applied.ts), met one that a claim without its lock (the id's advisory lock,
// or the key row of an ordered one) inserted;
// the loser's retry then sees the row and answers from it (422, or a duplicate).
export const CONTENDED = new Set(['55P03', '40P01', '40001', '23505']);

/** The SQLSTATE of a Postgres error, or undefined for anything else (a socket error, a bug). */
export function sqlState(err: unknown): string | undefined {
  return err && typeof err === 'object' && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}
