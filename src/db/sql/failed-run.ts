import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * Every statement that takes an event to apply (claim, take_next, take_pending, take_turn) is
 * followed by this savepoint, in the same round trip (src/db/drivers/fold.ts, `after`). When the
 * handler throws, the apply path rolls back to it instead of rolling the transaction back:
 * the handler's writes are gone, but the take's row locks stay held while the failed run is
 * recorded, in the same transaction. Before, a ROLLBACK released the event and a separate
 * `fail` counted the attempt afterwards, and in between another worker could take the event
 * and run the handler again at once (and its success then made the failure uncounted).
 */
export const APPLY_SAVEPOINT = 'savepoint wi_apply';

/**
 * The savepoint as a statement of its own: before each event of a batch but the first (whose
 * savepoint the take sent), and before the only one when the driver is not ours (a Kysely
 * instance the user passed: it does not send a take's `after`). Registered, so that on our pg
 * driver the previous event's held-back statements (its result, or its recorded failure) ride
 * on it: one round trip (src/db/drivers/fold.ts).
 */
export function createApplySavepoint(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'apply_savepoint', APPLY_SAVEPOINT);
  return async function applySavepoint(db: Queryable): Promise<void> {
    await statement.run(db, []);
  };
}

/**
 * The statements that turn a taken event back into a waiting one after its handler failed,
 * all riding on COMMIT with `fail` (whose rows the caller never reads): back to the savepoint;
 * the row waiting again (`held` or `pending`) with its payload kept for the retry, when the
 * claim marked it processed (a waiting event claimed again by its delivery). A row taken by
 * take_next, take_pending or take_turn was never marked (src/db/sql/mark-applied.ts marks it only
 * after a handler that succeeded): it still waits with its payload, so the revert writes
 * nothing, unless it is an ordered event waiting as `pending` (deferred mode), which goes back
 * as `held`, as it did when the take had marked it. Then the key's
 * cursor back at its seq when the take moved it (claim, take_next; take_turn moves it only
 * after the handler, so there the WHERE matches nothing). Then `fail` counts the attempt.
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
     where source = $1 and id = $2 and status <> $3`,
    { rides: 'commit' },
  );
  const rewind = defineStatement(
    names,
    t,
    'rewind_cursor',
    `update ${t.keys} set next_seq = $3::bigint where source = $1 and key = $2 and next_seq = $3::bigint + 1`,
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
    await revert.run(db, [a.source, a.id, a.waiting, a.payload, JSON.stringify(a.headers)]);
    if (a.key !== null) await rewind.run(db, [a.source, a.key, a.seq]);
  };
}
