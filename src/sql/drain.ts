import type { Kysely } from 'kysely';
import type { StatementNames } from '../database.js';
import { defineStatement, type Tables, toNumber } from './tables.js';

export interface TakenEvent {
  id: string;
  seq: number;
  hash: string;
  payload: Buffer;
  headers: Record<string, string>;
  attempts: number;
  receivedAt: Date;
  /** The seq after it is waiting too: keep draining. */
  more: boolean;
}

/** One round trip: lock the key, take the event at its cursor, advance the cursor. */
export function createTakeNext(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'take_next',
    `select * from ${t.fn('take_next')}($1, $2, $3, $4, $5)`,
  );
  return async function takeNext(
    db: Kysely<any>,
    source: string,
    key: string,
    wait: boolean,
    keepPayload: boolean,
    lockTimeout: string,
  ): Promise<TakenEvent | undefined> {
    const [row] = await statement.run<any>(db, [source, key, wait, keepPayload, lockTimeout]);
    if (!row) return undefined;
    return {
      id: row.id,
      seq: toNumber(row.seq)!,
      hash: row.body_hash,
      payload: Buffer.from(row.payload ?? []),
      headers: row.headers ?? {},
      attempts: row.attempts,
      receivedAt: new Date(row.received_at),
      more: row.more === true,
    };
  };
}
