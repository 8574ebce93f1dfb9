import type { Tables } from '../sql/tables.js';

/**
 * Migration 0012: the CHECK constraints on the state machine's columns are dropped
 * (`events.status`, `keys.state`, `keys.blocked_reason`). Frozen history: never edit it.
 *
 * Why: PostgreSQL builds a table's CHECK expressions again in every statement that writes it
 * (the stored expression is read back from its text, planned and compiled per execution, not
 * cached), so every new event's row paid for `status in (…)`: 16 µs of a backend's CPU, about 5% of
 * a transaction that writes the ledger and the row (`CLIENTS=10 TXS=5000 ROUNDS=7 npx tsx
 * bench/postgres-cost.ts events-row-only events-row-nocheck`), and every ordered event's key
 * row paid for two more. Only the inbox's own statements write these columns, always with
 * literal states; what the constraints guarded is now one of the invariants that
 * `checkInvariants` (src/testing/invariants.ts) states, `unknown-state`, checked after every
 * suite and chaos run as the others are. NOT NULL stays: it costs nothing per statement.
 *
 * Found by column, not by name: PostgreSQL named them after the table, and so after the
 * user's `prefix`, truncated past 63 characters.
 */
export function uncheckedStates(t: Tables): string {
  return `
do $mig$
declare
  c record;
begin
  for c in
    select con.conrelid::regclass::text as tbl, con.conname
      from pg_constraint con
      join pg_attribute a on a.attrelid = con.conrelid and a.attnum = con.conkey[1]
     where con.contype = 'c' and cardinality(con.conkey) = 1
       and ((con.conrelid = '${t.events}'::regclass and a.attname = 'status')
         or (con.conrelid = '${t.keys}'::regclass and a.attname in ('state', 'blocked_reason')))
  loop
    execute format('alter table %s drop constraint %I', c.tbl, c.conname);
  end loop;
end
$mig$;
`;
}
