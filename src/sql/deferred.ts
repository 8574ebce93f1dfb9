import type { Kysely } from 'kysely';
import type { StatementNames } from '../database.js';
import { defineStatement, type Tables, toNumber } from './tables.js';

export interface PendingEvent {
  id: string;
  hash: string;
  payload: Buffer;
  headers: Record<string, string>;
  attempts: number;
  receivedAt: Date;
}

/**
 * One round trip, inside the transaction that then runs the handler: takes one due unordered
 * pending event (SKIP LOCKED, so instances share the work) and marks it processed.
 */
export function createTakePending(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'take_pending',
    `select * from ${t.fn('take_pending')}($1, $2)`,
  );
  return async function takePending(
    db: Kysely<any>,
    source: string,
    keepPayload: boolean,
  ): Promise<PendingEvent | undefined> {
    const [row] = await statement.run<any>(db, [source, keepPayload]);
    if (!row) return undefined;
    return {
      id: row.id,
      hash: row.body_hash,
      payload: Buffer.from(row.payload ?? []),
      headers: row.headers ?? {},
      attempts: row.attempts,
      receivedAt: new Date(row.received_at),
    };
  };
}

/**
 * How many events of the source wait as pending (for `maxPending`). Reads the partial index of
 * waiting events; run by the workers every `pendingRefreshMs`, never per delivery.
 */
export function createCountPending(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'count_pending',
    `select count(*)::int as n from ${t.events} where source = $1 and status = 'pending'`,
  );
  return async function countPending(db: Kysely<any>, source: string): Promise<number> {
    const [row] = await statement.run<{ n: number }>(db, [source]);
    return Number(row?.n ?? 0);
  };
}

export interface TurnEvent extends PendingEvent {
  seq: number;
}

/** One round trip: take the ordered key's event at its cursor, without locking the key (see take_turn). */
export function createTakeTurn(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'take_turn', `select * from ${t.fn('take_turn')}($1, $2, $3)`);
  return async function takeTurn(
    db: Kysely<any>,
    source: string,
    key: string,
    keepPayload: boolean,
  ): Promise<TurnEvent | undefined> {
    const [row] = await statement.run<any>(db, [source, key, keepPayload]);
    if (!row) return undefined;
    return {
      id: row.id,
      seq: toNumber(row.seq)!,
      hash: row.body_hash,
      payload: Buffer.from(row.payload ?? []),
      headers: row.headers ?? {},
      attempts: row.attempts,
      receivedAt: new Date(row.received_at),
    };
  };
}

/** One round trip, after the handler: move the key's cursor past `seq`; true when the next seq waits. */
export function createAdvance(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'advance',
    `select ${t.fn('advance')}($1, $2, $3::bigint) as more`,
  );
  return async function advance(db: Kysely<any>, source: string, key: string, seq: number): Promise<boolean> {
    const [row] = await statement.run<{ more: boolean }>(db, [source, key, seq]);
    return row?.more === true;
  };
}
