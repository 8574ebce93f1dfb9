import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** The handler's result, for an event whose row the claim marked processed already (when there is one). */
export function createStoreResult(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'store_result',
    `update ${t.events} set result = $3::jsonb where source = $1 and stream = ${stream('$4::text', '$2')} and id = $2`,
    { rides: 'commit' },
  );
  return async function storeResult(
    db: Queryable,
    source: string,
    event: { id: string; key: string | null },
    json: string,
  ): Promise<void> {
    await statement.run(db, [source, event.id, json, event.key]);
  };
}
