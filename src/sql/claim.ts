import type { Kysely } from 'kysely';
import type { StatementNames } from '../database.js';
import { defineStatement, type Tables, toNumber } from './tables.js';

export type ClaimDecision = 'apply' | 'pending' | 'held' | 'duplicate' | 'dead' | 'mismatch' | 'buffer-full';

export interface ClaimArgs {
  source: string;
  id: string;
  key: string | null;
  seq: number | null;
  hash: string;
  /** Raw body; stored only where the event may be applied later (held, pending, late). */
  payload: Buffer | null;
  headers: Record<string, string> | null;
  /** true: the handler runs now, in this transaction; false: store as pending for a worker. */
  apply: boolean;
  keepPayload: boolean;
  firstSeen: boolean;
  maxHeld: number;
  maxAhead: number;
  lockTimeout: string;
}

export interface ClaimRow {
  decision: ClaimDecision;
  result: unknown;
  expected: number | null;
  reason: string | null;
  attempts: number;
  drain: boolean;
  receivedAt: Date;
}

/** One round trip: the whole decision for a delivery (see `claim` in migrations.ts). */
export function createClaim(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'claim',
    `select * from ${t.fn('claim')}($1, $2, $3, $4::bigint, $5, $6, $7::jsonb, $8, $9, $10, $11, $12::bigint, $13)`,
  );
  return async function claim(db: Kysely<any>, a: ClaimArgs): Promise<ClaimRow> {
    const [row] = await statement.run<any>(db, [
      a.source,
      a.id,
      a.key,
      a.seq,
      a.hash,
      a.payload,
      a.headers === null ? null : JSON.stringify(a.headers),
      a.apply,
      a.keepPayload,
      a.firstSeen,
      a.maxHeld,
      a.maxAhead,
      a.lockTimeout,
    ]);
    return {
      decision: row.decision,
      result: row.result ?? null,
      expected: toNumber(row.expected),
      reason: row.reason,
      attempts: row.attempts ?? 0,
      drain: row.drain === true,
      receivedAt: new Date(row.received_at),
    };
  };
}
