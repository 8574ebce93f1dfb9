import type { Tables } from './tables.js';

/**
 * The id's lock: a transaction-scoped advisory lock on a hash of the inbox's tables, the source
 * (length-prefixed) and the id. Every claim takes it before it reads or writes the id's row, so a
 * handler never runs for an id while another claim of it is in flight: the second waits (at most
 * lock_timeout: 409) and reads what the first committed. The text is part of the schema's contract:
 * a version that changed it would miss an earlier version's claims in a rolling deploy. A hash
 * collision only makes two ids wait; nothing is decided from the lock, only from the row read under
 * it. Lock order: ARCHITECTURE.md, "Locks".
 */
export function takeIdLock(t: Tables): string {
  return `perform pg_advisory_xact_lock(${idLockKey(t, 'p_source', 'p_id')});`;
}

/** The lock key as SQL of a source and an id: what `takeIdLock` waits for and the try-claim tries. */
export function idLockKey(t: Tables, source: string, id: string): string {
  return `hashtextextended(
      '${lockScope(t)}' || length(${source}) || '|' || ${source} || '|' || ${id}, 0)`;
}

/**
 * Under the id's lock, reads the id's row into `v_ev`, locked only when waiting cannot close a cycle:
 * an unordered row's other holders (a worker's batch, an operator) wait for no key or id lock. An
 * ordered row's holder may be a deferred worker between take_turn and advance, which then waits for
 * the key a claim waiting for this id may hold; such a row is read as committed, unlocked, and a
 * claim without that key finds it a mismatch. Locked by its stream (\`v_stream\`, the delivery's);
 * read without one, so that a row of the id in another stream is found: a mismatch.
 */
export function readIdRow(t: Tables): string {
  return `select * into v_ev from ${t.events} e
     where e.source = p_source and e.stream = v_stream and e.id = p_id for update skip locked;
    v_found := found;
    if not v_found then
      select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id;
      v_found := found;
      if v_found and v_ev.key is null then
        select * into v_ev from ${t.events} e
         where e.source = p_source and e.stream = v_ev.stream and e.id = p_id for update;
        v_found := found;
      end if;
    end if;`;
}

/** One inbox's tables (validated identifiers): inboxes sharing a database never wait for each other's ids. */
function lockScope(t: Tables): string {
  return `${t.schema}.${t.prefix}|`;
}
