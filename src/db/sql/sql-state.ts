/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
// 23505: a new event's row met one written without the id's lock; the retry answers from that row.
export const CONTENDED = new Set(['55P03', '40P01', '40001', '23505']);
