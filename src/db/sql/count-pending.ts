import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * How many events of the source wait as pending (for `maxPending`). Reads the partial index of
 * waiting events; run by the workers every 500 ms, never per delivery.
 */
export function createCountPending(names: StatementNames, t: Tables) {
  const statement = defineStatement<{ n: unknown }>(
    names,
    t,
    'count_pending',
    `select count(*)::int as n from ${t.events} where source = $1 and status = 'pending'`,
  );
  return async function countPending(db: Queryable, source: string): Promise<number> {
    const [row] = await statement.run(db, [source]);
    return Number(row?.n ?? 0);
  };
}
