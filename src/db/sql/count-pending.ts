import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** Pending events of the source (for `maxPending`), from the waiting index; read every 500 ms. */
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
