import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** A failed run's cause and `failed_at` (`--since` selects by it), riding on COMMIT. */
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
