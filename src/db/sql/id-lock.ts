import type { Tables } from './tables.js';

/**
 * The id's lock: every claim takes it before the id's row, so that a second claim waits and reads
 * what the first committed. Its text is part of the schema's contract (rolling deploys); a hash
 * collision only makes two ids wait, as nothing is decided from the lock.
 */
export function takeIdLock(t: Tables): string {
  return `perform pg_advisory_xact_lock(${idLockKey(t, 'p_source', 'p_id')});`;
}

/** The lock key as SQL of a source and an id. */
export function idLockKey(t: Tables, source: string, id: string): string {
  return `hashtextextended(
      '${lockScope(t)}' || length(${source}) || '|' || ${source} || '|' || ${id}, 0)`;
}

/**
 * Under the id's lock, reads the id's row into `v_ev`, locked only when waiting cannot close a
 * cycle: an ordered row's holder may wait for a key this claim holds, so it is read as committed.
 * Read without a stream too, so that a row of the id in another stream is found: a mismatch.
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

/** Inboxes sharing a database never wait for each other's ids. */
function lockScope(t: Tables): string {
  return `${t.schema}.${t.prefix}|`;
}
