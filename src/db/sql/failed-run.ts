import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** A failed handler rolls back to it: its writes go, but the take's row locks stay while it is recorded. */
export const APPLY_SAVEPOINT = 'savepoint wi_apply';

/** The savepoint on its own (a batch's later events), registered so held-back statements ride on it. */
export function createApplySavepoint(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'apply_savepoint', APPLY_SAVEPOINT);
  return async function applySavepoint(db: Queryable): Promise<void> {
    await statement.run(db, []);
  };
}

/** A taken event's row, as a failed run writes it back. */
export interface RunRow {
  source: string;
  id: string;
  key: string | null;
  seq: number | null;
  hash: string;
  payload: Buffer;
  headers: Record<string, string>;
}

/** A `RunRow` as the parameters $1 to $7. */
export function runRowParameters(a: RunRow): unknown[] {
  return [a.source, a.id, a.key, a.seq, a.hash, a.payload, JSON.stringify(a.headers)];
}

/** A taken event back to waiting after its handler failed, riding on COMMIT with `fail`. */
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
  return async function undoTake(db: Queryable, a: RunRow & { waiting: 'held' | 'pending' }): Promise<void> {
    await rollback.run(db, []);
    await revert.run(db, [a.source, a.id, a.waiting, a.payload, JSON.stringify(a.headers), a.key]);
    if (a.key !== null) await rewind.run(db, [a.source, a.key, a.seq]);
  };
}
