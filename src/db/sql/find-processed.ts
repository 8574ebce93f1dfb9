import type { CachedEvent } from '../../dedup/processed-cache.js';
import { fromJsonText, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** One autocommit primary-key read of a processed event, while duplicates are likely (duplicate-odds.ts). */
export function createFindProcessed(names: StatementNames, t: Tables) {
  const statement = defineStatement<{
    body_hash: string;
    key: string | null;
    seq: unknown;
    /** jsonb read back as text (`fromJsonText`). */
    result: string | null;
  }>(
    names,
    t,
    'find_processed',
    `select body_hash, key, seq, result::text as result from ${t.events} where source = $1 and id = $2 and status = 'processed'`,
  );
  return async function findProcessed(
    db: Queryable,
    source: string,
    id: string,
  ): Promise<CachedEvent | undefined> {
    const [row] = await statement.run(db, [source, id]);
    if (!row) return undefined;
    return { hash: row.body_hash, key: row.key, seq: toNumber(row.seq), result: fromJsonText(row.result) };
  };
}
