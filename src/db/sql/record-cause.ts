import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * A failed run's cause (src/apply/cause.ts) and time, on the event's row, after `fail` counted it
 * (and inserted the row of a new event): riding on the failed run's COMMIT with it, so it costs
 * no round trip. A statement of its own rather than two more parameters of `fail`: riding on the
 * same COMMIT it costs nothing more, and `fail` keeps to its one decision (count the attempt, or
 * dead-letter the event).
 * `failed_at` is what an operator's window (`--since`, `--until`) selects dead letters by.
 */
export function createRecordCause(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'record_cause',
    `update ${t.events} set cause = $3, failed_at = now() where source = $1 and id = $2`,
    { rides: 'commit' },
  );
  return async function recordCause(db: Queryable, source: string, id: string, cause: string): Promise<void> {
    await statement.run(db, [source, id, cause]);
  };
}
