import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * A failed run's cause and time on its row, riding on the failed run's COMMIT after `fail`, so `fail`
 * keeps to its one decision. `failed_at` is what `--since`/`--until` select dead letters by.
 */
export function createRecordCause(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'record_cause',
    `update ${t.events} set cause = $3, failed_at = now()
      where source = $1 and stream = ${stream('$4::text', '$2')} and id = $2`,
    { rides: 'commit' },
  );
  return async function recordCause(
    db: Queryable,
    source: string,
    event: { id: string; key: string | null },
    cause: string,
  ): Promise<void> {
    await statement.run(db, [source, event.id, cause, event.key]);
  };
}
