import type { Tables } from './tables.js';

/** Every claim takes the id's lock before the id's row; its text is part of the schema's contract. */
export function takeIdLock(t: Tables): string {
  return `perform pg_advisory_xact_lock(${idLockKey(t, 'p_source', 'p_id')});`;
}

/** The lock key as SQL of a source and an id. */
export function idLockKey(t: Tables, source: string, id: string): string {
  return `hashtextextended(
      '${lockScope(t)}' || length(${source}) || '|' || ${source} || '|' || ${id}, 0)`;
}

/** The id's row (any stream) into `v_ev`, locked only where waiting for it cannot close a cycle. */
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
