import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * Every take is followed by this savepoint in the same round trip. When the handler throws, the apply
 * path rolls back to it rather than rolling back the transaction: the handler's writes are gone, but
 * the take's row locks stay held while the failed run is recorded, so no other worker can take the
 * event and run it again in between.
 */
export const APPLY_SAVEPOINT = 'savepoint wi_apply';

/**
 * The savepoint as a statement of its own (each event of a batch but the first; a user's Kysely
 * instance), registered so the previous event's held-back statements ride on it.
 */
export function createApplySavepoint(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'apply_savepoint', APPLY_SAVEPOINT);
  return async function applySavepoint(db: Queryable): Promise<void> {
    await statement.run(db, []);
  };
}

/**
 * A taken event back to waiting after its handler failed, riding on COMMIT with `fail`: back to the
 * savepoint; the row waiting again where the claim had marked it processed (an ordered `pending`
 * row goes back `held`); the key's cursor back at its seq where the take moved it.
 */
export function createUndoTake(names: StatementNames, t: Tables) {
  const rollback = defineStatement(names, t, 'rollback_to_apply', 'rollback to savepoint wi_apply', {
    rides: 'commit',
  });
  const revert = defineStatement(
    names,
    t,
    'revert_taken',
    `update ${t.events} set status = $3, processed_at = null,
       payload = coalesce(payload, $4), headers = coalesce(headers, $5::jsonb)
     where source = $1 and stream = ${stream('$6::text', '$2')} and id = $2 and status <> $3`,
    { rides: 'commit' },
  );
  const rewind = defineStatement(
    names,
    t,
    'rewind_cursor',
    `update ${t.keys} set next_seq = $3::bigint
      where source = $1 and stream = ${stream('$2')} and key = $2 and next_seq = $3::bigint + 1`,
    { rides: 'commit' },
  );
  return async function undoTake(
    db: Queryable,
    a: {
      source: string;
      id: string;
      key: string | null;
      seq: number | null;
      waiting: 'held' | 'pending';
      payload: Buffer;
      headers: Record<string, string>;
    },
  ): Promise<void> {
    await rollback.run(db, []);
    await revert.run(db, [a.source, a.id, a.waiting, a.payload, JSON.stringify(a.headers), a.key]);
    if (a.key !== null) await rewind.run(db, [a.source, a.key, a.seq]);
  };
}
