/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
// 23505: a new event's row, inserted at COMMIT (src/db/sql/record-applied.ts), met one inserted
// by something that did not take the id's advisory lock (every claim takes it; an operator's
// or an application's own write may not): the last guard;
// the loser's retry then sees the row and answers from it (422, or a duplicate).
export const CONTENDED = new Set(['55P03', '40P01', '40001', '23505']);
