import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * Stores the handler's result, in the handler's transaction, for an event whose row the claim
 * marked processed already (a waiting event claimed again by a delivery, a latest-wins claim).
 * Only sent when there is one. Stored events taken by take_next, take_pending and take_turn
 * are marked with their result in one UPDATE instead (src/db/sql/mark-applied.ts).
 */
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
