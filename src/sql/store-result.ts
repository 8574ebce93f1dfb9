import type { Kysely } from 'kysely';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Tables } from './tables.js';

/** Stores the handler's result, in the handler's transaction. Only sent when there is one. */
export function createStoreResult(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'store_result',
    `update ${t.events} set result = $3::jsonb where source = $1 and id = $2`,
    'before-commit',
  );
  return async function storeResult(
    db: Kysely<any>,
    source: string,
    id: string,
    json: string,
  ): Promise<void> {
    await statement.run(db, [source, id, json]);
  };
}
