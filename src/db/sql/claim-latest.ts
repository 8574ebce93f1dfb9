import { fromJsonText, toDate, toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { APPLY_SAVEPOINT } from './failed-run.js';
import { readIdRow, takeIdLock } from './id-lock.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * `claim_latest`: the key row is the object's lock, `last_version` its cursor; an older event is
 * recorded `superseded`, not applied. Lock order: key row, id lock, event row (ARCHITECTURE.md).
 */
export function claimLatestFunction(t: Tables): string {
  return `
create or replace function ${t.fn('claim_latest')}(
  p_source text, p_id text, p_key text, p_version bigint, p_hash text, p_lock_timeout text
) returns table (decision text, result jsonb, latest bigint, reason text, attempts integer, received_at timestamptz)
language plpgsql as $fn$
declare
  v_prev_lock_timeout text := current_setting('lock_timeout');
  v_last bigint;
  v_ev ${t.events}%rowtype;
  v_superseded jsonb;
  v_found boolean;
  v_key_stream text := ${stream('p_key')};
  -- The event row has no key: its stream is its id's.
  v_stream text := ${stream('null', 'p_id')};
begin
  perform set_config('lock_timeout', p_lock_timeout, true);
  attempts := 0;
  received_at := now();
  select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.stream = v_key_stream and k.key = p_key for update;
  if not found then
    insert into ${t.keys} as k (source, key, next_seq, stream) values (p_source, p_key, 1, v_key_stream)
      on conflict (source, key, stream) do nothing;
    select k.last_version into v_last from ${t.keys} k where k.source = p_source and k.stream = v_key_stream and k.key = p_key for update;
  end if;
  latest := v_last;
  v_superseded := jsonb_build_object('superseded', true, 'key', p_key, 'version', p_version, 'latest', v_last);

  -- The id's lock, after the key row: an ordered, unordered or deferred claim of the same id
  -- waits until this one commits (and reads its row) rather than running its handler beside
  -- this one's. Then the row, never waiting for an ordered one (src/db/sql/id-lock.ts says why).
  ${takeIdLock(t)}
  ${readIdRow(t)}
  if not v_found then
    if v_last is not null and p_version < v_last then
      insert into ${t.events} (source, id, body_hash, status, result, processed_at, stream)
        values (p_source, p_id, p_hash, 'processed', v_superseded, now(), v_stream);
      decision := 'superseded';
      result := v_superseded;
    else
      insert into ${t.events} (source, id, body_hash, status, processed_at, stream)
        values (p_source, p_id, p_hash, 'processed', now(), v_stream);
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
    elsif v_ev.status in ('processed', 'ignored') then
      -- Ignored (no handler took its type) is as final as processed: a redelivery is a
      -- duplicate, told apart by its reason, never applied by this claim.
      decision := 'duplicate';
      result := v_ev.result;
      reason := nullif(v_ev.status, 'processed');
    elsif v_ev.status = 'dead' then
      decision := 'dead';
      reason := v_ev.dead_reason;
    elsif v_last is not null and p_version < v_last then
      -- It waited after a failed run, and a newer version was applied meanwhile.
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null, result = v_superseded
        where e.source = p_source and e.stream = v_ev.stream and e.id = p_id;
      decision := 'superseded';
      result := v_superseded;
    else
      update ${t.events} e set status = 'processed', processed_at = now(), run_after = null
        where e.source = p_source and e.stream = v_ev.stream and e.id = p_id;
      decision := 'apply';
    end if;
  end if;

  if decision = 'apply' then
    update ${t.keys} k set last_version = p_version, updated_at = now()
      where k.source = p_source and k.stream = v_key_stream and k.key = p_key;
  end if;
  perform set_config('lock_timeout', v_prev_lock_timeout, true);
  return next;
end
$fn$;
`;
}

export type ClaimLatestDecision = 'apply' | 'superseded' | 'duplicate' | 'dead' | 'mismatch';

export interface ClaimLatestRow {
  decision: ClaimLatestDecision;
  result: unknown;
  /** The version last applied for the key before this claim. */
  latest: number | null;
  reason: string | null;
  attempts: number;
  receivedAt: Date;
}

interface ClaimLatestResult {
  decision: ClaimLatestDecision;
  result: string | null;
  latest: unknown;
  reason: string | null;
  attempts: unknown;
  received_at: unknown;
}

export function createClaimLatest(names: StatementNames, t: Tables) {
  const statement = defineStatement<ClaimLatestResult>(
    names,
    t,
    'claim_latest',
    `select decision, result::text as result, latest, reason, attempts, received_at
       from ${t.fn('claim_latest')}($1, $2, $3, $4::bigint, $5, $6)`,
    { rides: 'begin', after: APPLY_SAVEPOINT },
  );
  return async function claimLatest(
    db: Queryable,
    a: { source: string; id: string; key: string; version: number; hash: string; lockTimeout: string },
  ): Promise<ClaimLatestRow> {
    const [row] = await statement.run(db, [a.source, a.id, a.key, a.version, a.hash, a.lockTimeout]);
    return {
      decision: row.decision,
      result: fromJsonText(row.result),
      latest: toNumber(row.latest),
      reason: row.reason,
      attempts: toNumber(row.attempts) ?? 0,
      receivedAt: toDate(row.received_at),
    };
  };
}
