import type { Tables } from './tables.js';

/**
 * The id's lock, in PL/pgSQL, for a function with parameters `p_source` and `p_id`: a
 * transaction-scoped advisory lock (held until COMMIT) on a 64-bit hash of the inbox's tables,
 * the source (length-prefixed, so no two (source, id) pairs give one text) and the id.
 *
 * Every claim (`claim`, ordered or not, inline or deferred; `claim_latest`) takes it before it
 * reads or writes the id's row, so a handler never runs for an id while another claim of that
 * id is in flight: the second claim waits (at most lock_timeout, 55P03 -> 409 in-flight) and
 * then reads what the first committed. Written here once, so that every claim hashes the same
 * text. The text is part of the schema's contract, as the functions are: a version that changed
 * it would let its claims and an earlier version's miss each other while both run (a rolling
 * deploy).
 *
 * Two ids whose hashes collide only wait for each other: nothing is decided from the lock,
 * only from the row read under it (READ COMMITTED: each statement sees what committed before
 * it). The lock order around it is in ARCHITECTURE.md, "Locks".
 */
export function takeIdLock(t: Tables): string {
  return `perform pg_advisory_xact_lock(${idLockKey(t, 'p_source', 'p_id')});`;
}

/**
 * The id's lock key as a SQL expression of a source and an id (PL/pgSQL variables, or a
 * statement's parameters): what `takeIdLock` waits for and the try-claim tries
 * (src/db/sql/try-claim.ts), written once so that both lock the same key.
 */
export function idLockKey(t: Tables, source: string, id: string): string {
  return `hashtextextended(
      '${lockScope(t)}' || length(${source}) || '|' || ${source} || '|' || ${id}, 0)`;
}

/**
 * Under the id's lock, reads the id's row into `v_ev` and `v_found`, locked `FOR UPDATE`
 * when it can wait for it without closing a cycle. Holding the id's lock, a claim may wait for
 * an unordered or latest-wins row (no key): its only other holders, a worker's batch or an
 * operator, wait for no key and no id lock. It never waits for an ordered row: that row's
 * holder without its key is a deferred worker between take_turn and advance, which then waits
 * for the key, and that key's holder may be a claim waiting for this id's lock. Such a row
 * is read as committed and not locked; a claim without that key finds it a mismatch
 * (its key differs), never something to apply.
 */
export function readIdRow(t: Tables): string {
  return `select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if v_found and v_ev.key is null then
        select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
        v_found := found;
      end if;
    end if;`;
}

/**
 * The scope of the id's lock: one inbox's tables (schema and prefix are validated
 * identifiers, safe inside a string literal), so that inboxes sharing a database never wait
 * for each other's ids.
 */
function lockScope(t: Tables): string {
  return `${t.schema}.${t.prefix}|`;
}
