import type { StatementNames } from '../drivers/common.js';
import { type ClaimArgs, type ClaimResult, type ClaimRow, toClaimRow } from './claim.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** `claim_many`: several deferred claims in one statement, each by `claim`, in the order given. */
export function claimManyFunction(t: Tables): string {
  return `
create or replace function ${t.fn('claim_many')}(
  p_source text, p_ids text[], p_keys text[], p_seqs bigint[], p_hashes text[],
  p_payloads bytea[], p_headers jsonb[], p_keep_payload boolean,
  p_first_seen boolean, p_max_held integer, p_max_ahead bigint, p_lock_timeout text, p_types text[],
  p_groups text[] default null
) returns table (ord integer, decision text, result jsonb, expected bigint, reason text, attempts integer,
                 drain boolean, received_at timestamptz)
language plpgsql as $fn$
declare
  v_i integer;
begin
  for v_i in 1 .. coalesce(array_length(p_ids, 1), 0) loop
    return query
      select v_i, c.decision, c.result, c.expected, c.reason, c.attempts, c.drain, c.received_at
        from ${t.fn('claim')}(p_source, p_ids[v_i], p_keys[v_i], p_seqs[v_i], p_hashes[v_i], p_payloads[v_i],
                              p_headers[v_i], false, p_keep_payload, p_first_seen, p_max_held, p_max_ahead,
                              p_lock_timeout, p_types[v_i], p_groups[v_i]) c;
  end loop;
end
$fn$;
`;
}

export type ClaimManyShared = Pick<
  ClaimArgs,
  'source' | 'keepPayload' | 'firstSeen' | 'maxHeld' | 'maxAhead' | 'lockTimeout'
>;

export type ClaimManyElement = Pick<
  ClaimArgs,
  'id' | 'key' | 'seq' | 'hash' | 'payload' | 'headers' | 'type' | 'group'
>;

/** With its element's place in the batch (1 for the first). */
interface ClaimManyResultRow extends ClaimResult {
  ord: number | string;
}

/** Sent outside a transaction: its own, committed before PostgreSQL answers. */
export function createClaimMany(names: StatementNames, t: Tables) {
  const statement = defineStatement<ClaimManyResultRow>(
    names,
    t,
    'claim_many',
    `select ord, decision, result::text as result, expected, reason, attempts, drain, received_at
       from ${t.fn('claim_many')}($1, $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::jsonb[],
                                  $8, $9, $10, $11::bigint, $12, $13::text[], $14::text[])`,
    { rides: 'begin' },
  );
  return async function claimMany(
    db: Queryable,
    shared: ClaimManyShared,
    elements: readonly ClaimManyElement[],
  ): Promise<ClaimRow[]> {
    const rows = await statement.run(db, [
      shared.source,
      elements.map((e) => e.id),
      elements.map((e) => e.key),
      elements.map((e) => (e.seq === null ? null : String(e.seq))),
      elements.map((e) => e.hash),
      elements.map((e) => e.payload),
      elements.map((e) => (e.headers === null ? null : JSON.stringify(e.headers))),
      shared.keepPayload,
      shared.firstSeen,
      shared.maxHeld,
      shared.maxAhead,
      shared.lockTimeout,
      elements.map((e) => e.type),
      elements.map((e) => e.group ?? ''),
    ]);
    const claims: ClaimRow[] = new Array(elements.length);
    for (const row of rows) claims[Number(row.ord) - 1] = toClaimRow(row);
    return claims;
  };
}
