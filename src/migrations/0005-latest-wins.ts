import type { Tables } from '../sql/tables.js';

/**
 * Migration 0005, latest-wins ordering. Frozen history: never edit it.
 * - `keys.last_version`: the version last applied for a key under `order: { policy: 'latest' }`.
 * - `claim_latest`: the claim of such an event (superseded when older than `last_version`).
 */
export function latestWins(t: Tables): string {
  return `
alter table ${t.keys} add column last_version bigint;

create or replace function ${t.fn('claim_latest')}(
  p_source text, p_id text, p_key text, p_version bigint, p_hash text, p_lock_timeout text
) returns table (decision text, result jsonb, latest bigint, reason text, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_last bigint;
  v_ev ${t.events}%rowtype;
  v_superseded jsonb;
begin
  perform set_config('lock_timeout', p_lock_timeout, true);
  attempts := 0;
  received_at := now();
  select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.key = p_key for update;
  if not found then
    insert into ${t.keys} as k (source, key, next_seq) values (p_source, p_key, 1)
      on conflict (source, key) do nothing;
    select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.key = p_key for update;
  end if;
  latest := v_last;
  v_superseded := jsonb_build_object('superseded', true, 'key', p_key, 'version', p_version, 'latest', v_last);

  select * into v_ev from ${t.events} e where e.source = p_source and e.id = p_id for update;
  if not found then
    if v_last is not null and p_version < v_last then
      insert into ${t.events} (source, id, body_hash, status, result, processed_at)
        values (p_source, p_id, p_hash, 'processed', v_superseded, now());
      decision := 'superseded';
      result := v_superseded;
    else
      insert into ${t.events} (source, id, body_hash, status, processed_at)
        values (p_source, p_id, p_hash, 'processed', now());
      decision := 'apply';
    end if;
  else
    attempts := v_ev.attempts;
    received_at := v_ev.received_at;
    if v_ev.body_hash <> p_hash then
      decision := 'mismatch';
      reason := 'body';
    elsif v_ev.key is not null then
      decision := 'mismatch';
      reason := 'key';
    elsif v_ev.status = 'processed' then
      decision := 'duplicate';
      result := v_ev.result;
    elsif v_ev.status = 'dead' then
      decision := 'dead';
      reason := v_ev.dead_reason;
    elsif v_last is not null and p_version < v_last then
      -- It waited after a failed run, and a newer version was applied meanwhile.
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null, result = v_superseded
        where e.source = p_source and e.id = p_id;
      decision := 'superseded';
      result := v_superseded;
    else
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null
        where e.source = p_source and e.id = p_id;
      decision := 'apply';
    end if;
  end if;

  if decision = 'apply' then
    update ${t.keys} k set last_version = p_version, updated_at = now()
      where k.source = p_source and k.key = p_key;
  end if;
  perform set_config('lock_timeout', v_prev_lock_timeout, true);
  return next;
end
$fn$;
`;
}
