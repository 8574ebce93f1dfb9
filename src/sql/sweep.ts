import type { Kysely } from 'kysely';
import type { StatementNames } from '../database.js';
import { defineStatement, type Tables, toNumber } from './tables.js';

export interface SweepRow {
  key: string;
  action: 'drain' | 'skipped' | 'blocked';
  fromSeq: number | null;
  toSeq: number | null;
}

/** One round trip per sweeper pass (see `sweep` in migrations.ts). */
export function createSweep(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'sweep',
    `select * from ${t.fn('sweep')}($1, $2::bigint, $3, $4)`,
  );
  return async function sweep(
    db: Kysely<any>,
    source: string,
    gapTimeoutMs: number,
    onGap: 'skip' | 'block',
    limit: number,
  ): Promise<SweepRow[]> {
    const rows = await statement.run<any>(db, [source, gapTimeoutMs, onGap, limit]);
    return rows.map((r) => ({
      key: r.key,
      action: r.action,
      fromSeq: toNumber(r.from_seq),
      toSeq: toNumber(r.to_seq),
    }));
  };
}
