import type { Tables } from '../sql/tables.js';
import { claim as claimOf0008 } from './0008-row-at-commit.js';

/**
 * Migration 0012: what PostgreSQL prepared again at every write of an event or key row, and
 * never needed to, is gone (BENCHMARKS.md, "Lean event writes").
 *
 * - The trigger `notify_pending` is dropped; the claim announces a stored pending event itself.
 *   The trigger's WHEN condition (a pending row, due now) was prepared at every INSERT into the
 *   events table, also for the processed row of every event applied inline, which it never
 *   fires for. The claim's two inserts of a pending row now `pg_notify` the same channel with
 *   the same payload, queued by the same statement and sent at COMMIT, as the trigger did. No
 *   other statement inserts a due pending row: `fail` stores a failed event with its
 *   `run_after`, which the trigger never announced either. During a rolling deploy, instances
 *   of earlier versions call the same claim function (the 13-parameter one wraps it), so they
 *   announce their pending events the new way too.
 * - The CHECKs that list allowed values (`status`, `state`, `blocked_reason`, `reason`) are
 *   written again with a constant array. `x in ('a', 'b')` is stored as an array expression
 *   that PostgreSQL folds into a constant at every INSERT and UPDATE of the table (an executor
 *   of its own, each time); `x = any ('{a,b}'::text[])` is stored folded. Same values, same
 *   guard. Each old one is found by its column (its name may have been truncated) and dropped,
 *   and the new one is named by PostgreSQL as the old one was; adding it reads the table once
 *   to validate it.
 *
 * Frozen history: never edit it; today's claim lives in src/sql/claim.ts.
 */
export function leanEventWrites(t: Tables): string {
  const checks: Array<[table: string, column: string, values: string]> = [
    [t.events, 'status', 'pending,held,processed,dead'],
    [t.keys, 'state', 'open,blocked'],
    [t.keys, 'blocked_reason', 'gap,poison'],
    [t.gaps, 'reason', 'timeout,skip,poison'],
  ];
  return (
    `
drop trigger ${t.local('events_notify_pending')} on ${t.events};
drop function ${t.fn('notify_pending')}();
` +
    checks.map(([table, column, values]) => foldedCheck(table, column, values)).join('') +
    claim(t)
  );
}

/** The one-column CHECK of `column` dropped (found by its column) and added again, folded. */
function foldedCheck(table: string, column: string, values: string): string {
  // The table's name is quoted and qualified by createTables, from validated identifiers.
  return `
do $do$
declare v_name name;
begin
  select c.conname into strict v_name
    from pg_constraint c join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
   where c.conrelid = '${table}'::regclass and c.contype = 'c'
     and cardinality(c.conkey) = 1 and a.attname = '${column}';
  execute format('alter table %s drop constraint %I', '${table}', v_name);
end
$do$;
alter table ${table} add check (${column} = any ('{${values}}'::text[]));
`;
}

// The claim as of this migration: 0008's (frozen), with a `pg_notify` after each of its two
// inserts of a due pending row.
function claim(t: Tables): string {
  const notify = (payload: string) =>
    `perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || p_source), ${payload});`;
  return addAfter(
    addAfter(claimOf0008(t), `          decision := 'pending';\n`, `          ${notify('p_key')}\n`),
    `        decision := case when p_apply then 'apply' else 'pending' end;\n`,
    `        if not p_apply then\n          ${notify("''")}\n        end if;\n`,
  );
}

/** `text` with `added` after its one occurrence of `line`; throws if there is not exactly one. */
function addAfter(text: string, line: string, added: string): string {
  const at = text.indexOf(line);
  if (at < 0 || text.indexOf(line, at + 1) >= 0)
    throw new Error(`migration 0012: not one ${JSON.stringify(line)}`);
  return text.slice(0, at + line.length) + added + text.slice(at + line.length);
}
