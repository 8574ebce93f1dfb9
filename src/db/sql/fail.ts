import type { StatementNames } from '../drivers/common.js';
import { type RunRow, runRowParameters } from './failed-run.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/**
 * `fail`: counts a failed run after the rollback to the take's savepoint, keeping the payload; dead-letters
 * it after p_max_attempts. The key row is re-created at its seq if the rollback took it.
 */
export function failFunction(t: Tables): string {
  return `
create or replace function ${t.fn('fail')}(
  p_source text, p_id text, p_key text, p_seq bigint, p_hash text, p_payload bytea, p_headers jsonb,
  p_error text, p_max_attempts integer, p_on_poison text, p_retry_in_ms bigint, p_received_at timestamptz,
  p_dead_reason text, p_type text, p_group text default ''
) returns table (decision text, attempts integer, drain boolean)
language plpgsql as $fn$
declare
  v_attempts integer;
  v_stream text := ${stream('p_key', 'p_id')};
begin
  drain := false;
  if p_key is not null then
    -- Lock order (ARCHITECTURE.md, "Locks"): the key row, then the event row, as the claim,
    -- take_next and the operator actions do. Updating the event first and the key after
    -- deadlocked against a sender's retry of the same event, whose claim held the key.
    insert into ${t.keys} as k (source, key, next_seq, stream) values (p_source, p_key, p_seq, v_stream)
      on conflict (source, key, stream) do nothing;
    perform 1 from ${t.keys} k where k.source = p_source and k.stream = v_stream and k.key = p_key for update;
  end if;
  -- The type goes on the row whatever the run's end: a dead letter is listed and selected by it.
  insert into ${t.events} as e (source, id, key, seq, body_hash, status, payload, headers, attempts, last_error,
                                run_after, received_at, type, stream, group_key)
    values (p_source, p_id, p_key, p_seq, p_hash, 'pending', p_payload, p_headers, 1, p_error,
            now() + p_retry_in_ms * interval '1 millisecond', coalesce(p_received_at, now()), p_type, v_stream, p_group)
    on conflict (source, id, stream) do update
      set attempts = e.attempts + 1, last_error = excluded.last_error, run_after = excluded.run_after,
          payload = coalesce(e.payload, excluded.payload), headers = coalesce(e.headers, excluded.headers),
          type = coalesce(excluded.type, e.type)
      where e.status in ('pending', 'held') and (excluded.body_hash = '' or e.body_hash = excluded.body_hash)
    returning e.attempts into v_attempts;
  if not found then
    -- Applied (or dead-lettered) meanwhile by another delivery: this failure no longer counts.
    decision := 'gone';
    return next;
    return;
  end if;
  attempts := v_attempts;
  if v_attempts < p_max_attempts then
    decision := 'failed';
    return next;
    return;
  end if;
  -- 'poison' after p_max_attempts; 'rejected' at once (the handler threw RejectEvent). The key
  -- follows onPoison either way; its block and gap reason stay 'poison' (an event it could not apply).
  update ${t.events} e set status = 'dead', dead_reason = p_dead_reason, run_after = null
    where e.source = p_source and e.stream = v_stream and e.id = p_id;
  decision := 'dead';
  if p_key is not null then
    if p_on_poison = 'block' then
      update ${t.keys} k set state = 'blocked', blocked_seq = p_seq, blocked_reason = 'poison', updated_at = now()
        where k.source = p_source and k.stream = v_stream and k.key = p_key and k.next_seq = p_seq;
    else
      -- A gap is recorded only when the cursor moves past it: one recorded ahead of the cursor
      -- would make the key's later gap timeouts collide with it.
      update ${t.keys} k set next_seq = p_seq + 1, updated_at = now()
        where k.source = p_source and k.stream = v_stream and k.key = p_key and k.next_seq = p_seq;
      drain := found;
      if drain then
        insert into ${t.gaps} (source, key, from_seq, to_seq, reason, stream)
          values (p_source, p_key, p_seq, p_seq, 'poison', v_stream)
          on conflict do nothing;
      end if;
    end if;
  end if;
  return next;
end
$fn$;
`;
}

export interface FailArgs extends RunRow {
  error: string;
  maxAttempts: number;
  onPoison: 'block' | 'skip';
  retryInMs: number;
  receivedAt: Date | null;
  /** The dead letter's reason when this failure dead-letters the event. */
  deadReason: 'poison' | 'rejected';
  type: string | null;
  group?: string;
}

/** What recording a failed run decided (computed by the apply path: `fail` is never read back). */
export interface FailRow {
  /** 'failed': counted, will be retried; 'dead': dead-lettered. */
  decision: 'failed' | 'dead';
  attempts: number;
  drain: boolean;
  reason?: 'poison' | 'rejected';
}

/** In the failed run's own transaction, riding on its COMMIT. */
export function createFail(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'fail',
    `select * from ${t.fn('fail')}($1, $2, $3, $4::bigint, $5, $6, $7::jsonb, $8, $9, $10, $11::bigint, $12::timestamptz, $13, $14, $15)`,
    { rides: 'commit' },
  );
  return async function fail(db: Queryable, a: FailArgs): Promise<void> {
    await statement.run(db, [
      ...runRowParameters(a),
      a.error,
      a.maxAttempts,
      a.onPoison,
      a.retryInMs,
      a.receivedAt,
      a.deadReason,
      a.type,
      a.group ?? '',
    ]);
  };
}
