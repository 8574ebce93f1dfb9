/** The identity a delivery of an id must share with its stored event to be a duplicate of it. */
export interface EventIdentity {
  readonly hash: string;
  readonly key: string | null;
  readonly seq: number | null;
}

/** What differs between a stored event and a delivery of its id, in the claim's order. */
export function mismatchOf(stored: EventIdentity, delivery: EventIdentity): 'body' | 'key' | 'seq' | null {
  if (stored.hash !== delivery.hash) return 'body';
  if (stored.key !== delivery.key) return 'key';
  return stored.seq !== delivery.seq ? 'seq' : null;
}
