import type { Kysely } from 'kysely';
import type { StatementNames } from '../database.js';
import { defineStatement, type Tables } from './tables.js';

export interface FailArgs {
  source: string;
  id: string;
  key: string | null;
  seq: number | null;
  hash: string;
  payload: Buffer;
  headers: Record<string, string>;
  error: string;
  maxAttempts: number;
  onPoison: 'block' | 'skip';
  retryInMs: number;
  receivedAt: Date | null;
}

export interface FailRow {
  /** 'failed': counted, will be retried; 'dead': poison; 'gone': applied meanwhile elsewhere. */
  decision: 'failed' | 'dead' | 'gone';
  attempts: number;
  drain: boolean;
}

/** One round trip, outside the handler's (rolled back) transaction. */
export function createFail(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'fail',
    `select * from ${t.fn('fail')}($1, $2, $3, $4::bigint, $5, $6, $7::jsonb, $8, $9, $10, $11::bigint, $12::timestamptz)`,
  );
  return async function fail(db: Kysely<any>, a: FailArgs): Promise<FailRow> {
    const [row] = await statement.run<any>(db, [
      a.source,
      a.id,
      a.key,
      a.seq,
      a.hash,
      a.payload,
      JSON.stringify(a.headers),
      a.error,
      a.maxAttempts,
      a.onPoison,
      a.retryInMs,
      a.receivedAt,
    ]);
    return { decision: row.decision, attempts: row.attempts ?? 0, drain: row.drain === true };
  };
}
