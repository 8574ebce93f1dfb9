import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** The handler's result, for an event whose row the claim marked processed already (when there is one). */
export function createStoreResult(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'store_result',
    `update ${t.events} set result = $3::jsonb where source = $1 and id = $2`,
    { rides: 'commit' },
  );
  return async function storeResult(db: Queryable, source: string, id: string, json: string): Promise<void> {
    await statement.run(db, [source, id, json]);
  };
}
